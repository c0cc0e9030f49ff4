"""compose.yaml, the Dockerfile and deploy/ checked without Docker.

No container engine runs here, so this reads the files the way Compose,
HAProxy, Prometheus and Grafana would, and checks that they agree with each
other and with the code: every referenced file exists, every gateway and
mock-node command parses with the real CLI parsers, the config the replicas
load is valid, and the ports and host names line up between compose.yaml,
haproxy.cfg, prometheus.yml and Grafana's provisioning (the metrics the
board queries are checked against a real scrape in test_observability.py).
Where the real tool is installed (``haproxy``, ``docker
compose``), its own config check runs too. test_scaleout.py runs the same
topology as plain processes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest
import yaml

from bench.mocknode import build_parser as mocknode_parser
from gateway.cli.parser import build_parser as gateway_parser
from gateway.config import Config, load_config
from gateway.redis.embedded import LOOPBACK, RedisProcess, free_port, redis_server_binary
from tests.helpers.config import scenario
from tests.helpers.procs import gateway_processes, mock_node_process, stop

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "compose.yaml"
GATEWAYS = ("gateway-1", "gateway-2", "gateway-3")
MOCKS = {"mock-bsc": 56, "mock-opbnb": 204}
SERVICES = {"redis", "lb", "prometheus", "grafana", *GATEWAYS, *MOCKS}
REDIS_PORT = 6379  # the redis image's default
PROMETHEUS_PORT = 9090  # the prometheus image's default


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(data, dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    result: dict[str, dict[str, Any]] = compose["services"]
    return result


def bind_mounts(service: dict[str, Any]) -> dict[str, Path]:
    """Container path -> host path of every ``./host:/container[:ro]`` volume."""
    mounts = {}
    for entry in service.get("volumes", []):
        parts = entry.split(":")
        if parts[0].startswith("."):
            mounts[parts[1]] = (ROOT / parts[0]).resolve()
    return mounts


def gateway_port(service: dict[str, Any]) -> int:
    command = service["command"]
    assert command[0] == "gateway"
    args = gateway_parser().parse_args(command[1:])
    assert args.command == "serve" and not args.demo
    assert args.host == "0.0.0.0" and isinstance(args.port, int)
    return args.port


def gateway_config(service: dict[str, Any]) -> Config:
    env = service["environment"]
    host_path = bind_mounts(service)[env["GATEWAY_CONFIG"]]
    return load_config(host_path, env=env)


def haproxy_sections(text: str) -> Iterator[tuple[str, list[str]]]:
    """(section header, its directive lines) of an HAProxy config."""
    header, lines = "", list[str]()
    for raw in text.splitlines():
        line = (
            raw.split("#", 1)[0].rstrip()
            if not raw.lstrip().startswith("log-format")
            else raw.rstrip()
        )
        if not line.strip():
            continue
        if not line[0].isspace():
            if header:
                yield header, lines
            header, lines = line.strip(), []
        else:
            lines.append(line.strip())
    if header:
        yield header, lines


@pytest.fixture(scope="module")
def haproxy(services: dict[str, dict[str, Any]]) -> dict[str, list[str]]:
    cfg = bind_mounts(services["lb"])["/usr/local/etc/haproxy/haproxy.cfg"]
    return dict(haproxy_sections(cfg.read_text()))


# -- compose.yaml ------------------------------------------------------------------------
def test_the_stack_has_every_part(services: dict[str, dict[str, Any]]) -> None:
    assert set(services) == SERVICES
    for name, service in services.items():
        for dep in service.get("depends_on", []):
            assert dep in services, f"{name} depends on unknown service {dep}"
        for container_path, host_path in bind_mounts(service).items():
            assert host_path.exists(), f"{name}: {host_path} (for {container_path}) is missing"
        if "build" in service:
            assert (ROOT / service["build"] / "Dockerfile").is_file()


def test_redis_keeps_an_append_only_file(services: dict[str, dict[str, Any]]) -> None:
    redis = services["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    assert any(v.endswith(":/data") for v in redis["volumes"])  # the AOF survives restarts
    assert "ports" not in redis  # reachable by the gateways only


def test_gateway_replicas_run_the_real_cli(services: dict[str, dict[str, Any]]) -> None:
    for name in GATEWAYS:
        service = services[name]
        port = gateway_port(service)
        cfg = gateway_config(service)
        assert cfg.server.port == port
        url = urlsplit(cfg.redis.url)
        assert url.scheme == "redis" and url.hostname == "redis"
        assert (url.port or REDIS_PORT) == REDIS_PORT
        assert not cfg.redis.fail_open
        assert service["depends_on"]["redis"]["condition"] == "service_healthy"
        health = " ".join(service["healthcheck"]["test"])
        assert f"127.0.0.1:{port}/readyz" in health
        grace = int(service["stop_grace_period"].rstrip("s"))
        assert grace > cfg.server.drain_timeout_s  # SIGKILL only after the drain
        assert "ports" not in service  # reached through the load balancer only


def test_upstreams_are_the_mock_nodes(services: dict[str, dict[str, Any]]) -> None:
    mocks: dict[tuple[str | None, int | None], int] = {}
    for name, chain_id in MOCKS.items():
        command = services[name]["command"]
        assert command[:3] == ["python", "-m", "bench.mocknode"]
        args = mocknode_parser().parse_args(command[3:])
        assert args.chain_id == chain_id and args.host == "0.0.0.0"
        mocks[(name, args.port)] = chain_id
    for name in GATEWAYS:
        for net in gateway_config(services[name]).networks:
            for upstream in net.upstreams:
                url = urlsplit(upstream)
                assert mocks[(url.hostname, url.port)] == net.chain_id, upstream


def test_load_balancer_fronts_every_replica(
    services: dict[str, dict[str, Any]], haproxy: dict[str, list[str]]
) -> None:
    backend = haproxy["backend gateways"]
    servers = {line.split()[2] for line in backend if line.startswith("server ")}
    assert servers == {f"{name}:{gateway_port(services[name])}" for name in GATEWAYS}
    assert "option httpchk GET /readyz" in backend
    assert "http-check expect status 200" in backend
    assert any(" check" in f" {line} " for line in backend if line.startswith("default-server"))

    bind = next(line for line in haproxy["frontend rpc"] if line.startswith("bind "))
    rpc_port = int(bind.split(":")[-1])
    published = {int(p.split(":")[1]) for p in services["lb"]["ports"]}
    assert rpc_port in published
    for line in haproxy["frontend rpc"]:  # no API key in the load balancer's logs
        if line.startswith("log-format"):
            assert "%r" not in line and "%HU" not in line and "%hr" not in line
            assert "path" not in line and "%[capture" not in line


def test_trusted_proxy_is_the_load_balancer(
    services: dict[str, dict[str, Any]], compose: dict[str, Any]
) -> None:
    lb_ip = ipaddress.ip_address(services["lb"]["networks"]["backend"]["ipv4_address"])
    subnet = compose["networks"]["backend"]["ipam"]["config"][0]["subnet"]
    assert lb_ip in ipaddress.ip_network(subnet)
    for name in GATEWAYS:
        trusted = gateway_config(services[name]).server.trusted_proxies
        assert trusted and all(lb_ip in ipaddress.ip_network(c) for c in trusted)


def test_prometheus_scrapes_every_replica(
    services: dict[str, dict[str, Any]], haproxy: dict[str, list[str]]
) -> None:
    prom = services["prometheus"]
    config = yaml.safe_load(bind_mounts(prom)["/etc/prometheus/prometheus.yml"].read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {t for c in jobs["gateway"]["static_configs"] for t in c["targets"]}
    metrics_ports = {
        name: gateway_config(services[name]).server.metrics_listen.rpartition(":")[2]
        for name in GATEWAYS
    }
    assert targets == {f"{name}:{metrics_ports[name]}" for name in GATEWAYS}
    for name in GATEWAYS:  # the RPC port is not where metrics are
        assert metrics_ports[name] != str(gateway_port(services[name]))
        assert gateway_config(services[name]).server.metrics_listen.startswith("0.0.0.0:")
        assert not any(metrics_ports[name] in p for p in services[name].get("ports", []))
    assert jobs["gateway"].get("metrics_path", "/metrics") == "/metrics"
    stats_bind = next(line for line in haproxy["frontend stats"] if line.startswith("bind "))
    lb_targets = {t for c in jobs["haproxy"]["static_configs"] for t in c["targets"]}
    assert lb_targets == {f"lb:{stats_bind.split(':')[-1]}"}
    assert f"{PROMETHEUS_PORT}:{PROMETHEUS_PORT}" in prom["ports"]


# -- Grafana -----------------------------------------------------------------------------
def test_grafana_is_provisioned_with_the_gateway_dashboard(
    services: dict[str, dict[str, Any]],
) -> None:
    grafana = services["grafana"]
    mounts = bind_mounts(grafana)
    provisioning = mounts["/etc/grafana/provisioning"]
    source = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())
    datasource = source["datasources"][0]
    url = urlsplit(datasource["url"])
    assert url.hostname == "prometheus" and url.port == PROMETHEUS_PORT
    providers = yaml.safe_load((provisioning / "dashboards" / "gateway.yml").read_text())
    path = providers["providers"][0]["options"]["path"]
    dashboards = mounts[path]
    files = sorted(dashboards.glob("*.json"))
    assert files
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert Path(home).parent == Path(path) and (dashboards / Path(home).name).exists()

    for file in files:
        dash = json.loads(file.read_text())
        for panel in dash["panels"]:
            # the board's ${DS_PROMETHEUS} variable picks the provisioned Prometheus
            assert panel["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
    assert datasource["type"] == "prometheus" and datasource["isDefault"]
    # Every metric a panel queries, and its labels: test_observability.py, against
    # a real scrape of a running gateway.


# -- Dockerfile --------------------------------------------------------------------------
def dockerfile_instructions() -> list[str]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    text = "\n".join(
        ln
        for ln in (ROOT / "Dockerfile").read_text().splitlines()
        if not ln.lstrip().startswith("#")
    )
    return [" ".join(i.split()) for i in text.replace("\\\n", " ").splitlines() if i.strip()]


def test_dockerfile_builds_the_package_and_runs_the_cli() -> None:
    lines = dockerfile_instructions()
    assert lines[0] == "FROM python:3.11-slim"
    ignored = {
        ln.strip()
        for ln in (ROOT / ".dockerignore").read_text().splitlines()
        if ln.strip() and not ln.startswith("#")
    }
    copied = set()
    for line in lines:
        if line.startswith("COPY "):
            for src in line.split()[1:-1]:
                assert (ROOT / src).exists(), src
                assert src not in ignored, f"{src} is copied but .dockerignore drops it"
                copied.add(src)
    assert {"pyproject.toml", "README.md", "gateway", "bench"} <= copied  # what pip needs
    assert any(re.match(r"RUN pip install \.( |$)", line) for line in lines)
    cmd = json.loads(next(line for line in lines if line.startswith("CMD "))[4:])
    args = gateway_parser().parse_args(cmd[1:])
    assert cmd[0] == "gateway" and args.command == "serve"
    assert f"EXPOSE {args.port}" in lines
    assert any(line.startswith("USER ") and "root" not in line for line in lines)
    assert {".git", "tests"} <= ignored


# -- the real tools, where installed ------------------------------------------------------
@pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed")
def test_haproxy_accepts_its_config(services: dict[str, dict[str, Any]]) -> None:
    cfg = bind_mounts(services["lb"])["/usr/local/etc/haproxy/haproxy.cfg"]
    result = subprocess.run(
        ["haproxy", "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _compose_available() -> bool:
    if shutil.which("docker") is None:
        return False
    probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.skipif(not _compose_available(), reason="docker compose is not installed")
def test_docker_compose_accepts_the_file() -> None:  # pragma: no cover - no compose here
    result = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr


# -- healthchecks, run for real ---------------------------------------
OWN_IMAGE = "rpc-gateway:local"


def dockerfile_healthcheck() -> list[str]:
    """The Dockerfile's ``HEALTHCHECK ... CMD [...]``: what a service of our image inherits."""
    text = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    match = re.search(r"^HEALTHCHECK\b.*?\bCMD\s+(\[.*\])\s*$", text, re.M)
    assert match, "the Dockerfile has no exec-form HEALTHCHECK"
    command: list[str] = json.loads(match.group(1))
    return ["CMD", *command]


def effective_healthcheck(service: dict[str, Any]) -> list[str] | None:
    """The service's own healthcheck, or the one its image brings (ours only: known here)."""
    own = service.get("healthcheck")
    if own is not None:
        if own.get("disable"):
            return None
        test: list[str] = own["test"]
        return test
    if service.get("image") == OWN_IMAGE:
        return dockerfile_healthcheck()
    return None


def run_healthcheck(test: list[str], replace: dict[str, str], timeout_s: float = 10.0) -> int:
    """Run a compose ``test`` on this host, with container addresses mapped to ours."""
    kind, *argv = test
    mapped = []
    for arg in argv:
        for old, new in replace.items():
            arg = arg.replace(old, new)
        mapped.append(arg)
    if kind == "CMD-SHELL":
        mapped = ["sh", "-c", " ".join(mapped)]
    else:
        assert kind == "CMD", test
    result = subprocess.run(mapped, capture_output=True, timeout=timeout_s)
    return result.returncode


def test_every_service_of_ours_has_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    for name in ("redis", *GATEWAYS, *MOCKS):
        assert effective_healthcheck(services[name]) is not None, name


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MOCKS))
def test_mock_node_healthcheck_passes_against_a_mock_node(
    services: dict[str, dict[str, Any]], name: str
) -> None:
    """The healthcheck the service really gets (not the image's GET /healthz: 405 there)."""
    service = services[name]
    test = effective_healthcheck(service)
    assert test is not None
    port = free_port()
    command = [sys.executable if arg == "python" else arg for arg in service["command"]]
    command[command.index("--port") + 1] = str(port)
    command[command.index("--host") + 1] = "127.0.0.1"
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith(b"http://")
        python = {"python": sys.executable}
        rc = run_healthcheck(
            [test[0], *(python.get(a, a) for a in test[1:])], {":8545": f":{port}"}
        )
        assert rc == 0, f"{name}: healthcheck {test} failed"
        inherited = ["CMD", *(python.get(a, a) for a in dockerfile_healthcheck()[1:])]
        assert run_healthcheck(inherited, {":8545": f":{port}"}) != 0  # why it needs its own
    finally:
        stop(proc)


@pytest.mark.slow
def test_gateway_healthcheck_passes_against_a_gateway(
    services: dict[str, dict[str, Any]], tmp_path: Path, redis_url: str, prefix: str
) -> None:
    test = effective_healthcheck(services["gateway-1"])
    assert test is not None
    with mock_node_process(56) as bsc, mock_node_process(204) as opbnb:
        cfg = tmp_path / "gateway.toml"
        cfg.write_text(scenario("unlimited", prefix=prefix, bsc=bsc, opbnb=opbnb))
        env = {"GATEWAY_REDIS_URL": redis_url}
        with gateway_processes(1, cfg, env) as (port,):
            python = {"python": sys.executable}
            argv = [test[0], *(python.get(a, a) for a in test[1:])]
            assert run_healthcheck(argv, {":8545": f":{port}"}) == 0


@pytest.mark.slow
def test_redis_healthcheck_passes_against_redis(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    test = effective_healthcheck(services["redis"])
    assert test is not None and test[:2] == ["CMD", "redis-cli"]
    cli = Path(redis_server_binary()).with_name("redis-cli")
    with RedisProcess(tmp_path, persist=False, tcp=True) as redis:
        argv = ["CMD", str(cli), "-h", LOOPBACK, "-p", str(redis.port), *test[2:]]
        assert run_healthcheck(argv, {}) == 0


@contextmanager
def _compose_mock(service: dict[str, Any]) -> Iterator[str]:
    """The service's own command as a process, on a free loopback port; yields its URL."""
    command = [sys.executable if arg == "python" else arg for arg in service["command"]]
    command[command.index("--port") + 1] = "0"
    command[command.index("--host") + 1] = LOOPBACK
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        assert url.startswith("http://"), url
        yield url
    finally:
        stop(proc)


@pytest.mark.slow
async def test_compose_mock_nodes_serve_subscriptions_through_a_gateway(
    services: dict[str, dict[str, Any]], tmp_path: Path, redis_url: str, prefix: str, api_key: str
) -> None:
    """Before, the compose mocks answered the WebSocket handshake 405 and every
    subscription through the stack failed: they must speak WebSocket like the demo's."""
    with (
        _compose_mock(services["mock-bsc"]) as bsc,
        _compose_mock(services["mock-opbnb"]) as opbnb,
    ):
        cfg = tmp_path / "gateway.toml"
        cfg.write_text(scenario("unlimited", prefix=prefix, bsc=bsc, opbnb=opbnb))
        env = {"GATEWAY_REDIS_URL": redis_url}
        with gateway_processes(1, cfg, env) as (port,):
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(f"ws://{LOOPBACK}:{port}/bsc/{api_key}") as ws,
            ):
                call = {"jsonrpc": "2.0", "id": 1, "method": "eth_subscribe"}
                await ws.send_json({**call, "params": ["newHeads"]})
                answer = await asyncio.wait_for(ws.receive_json(), 10)
                assert isinstance(answer.get("result"), str), answer
                note = await asyncio.wait_for(ws.receive_json(), 10)  # a block a second
                assert note["method"] == "eth_subscription", note
                assert note["params"]["subscription"] == answer["result"]
                assert int(note["params"]["result"]["number"], 16) > 0
