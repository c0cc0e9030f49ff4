"""deploy/k8s/ checked without a cluster, and compose.yaml by a real schema tool.

No Kubernetes API server runs here. ``kubectl kustomize`` renders the example
overlay exactly as ``kubectl apply -k deploy/k8s/overlays/example`` would send
it, and ``kubernetes-validate --strict`` checks every object against the
OpenAPI schemas of a current Kubernetes (the package ships them, so this
works offline). The rendered objects are then read for what a schema cannot
see: selectors match the pod labels, probes point at routes the real app
serves, container ports match ``gateway.toml`` (loaded by the real config
loader), the grace period outlasts the preStop sleep plus the drain, the
metrics port stays out of the Service and behind a NetworkPolicy, the
Secret never replaces one made by hand and names the Redis the example
ships, ``trusted_proxies`` is narrow, every network has WebSocket URLs, and
the memory request follows the worker memory formula.
"""

from __future__ import annotations

import base64
import ipaddress
import shutil
import subprocess
import sys
import tomllib
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from gateway.app import create_app
from gateway.config import Config, config_from_dict

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAY = K8S / "overlays" / "example"
REQUIRED = {
    "ConfigMap",
    "Secret",
    "Deployment",
    "Service",
    "PodDisruptionBudget",
    "HorizontalPodAutoscaler",
    "NetworkPolicy",
    "StatefulSet",  # the example's own Redis
}
# Kubernetes versions the manifests must pass: the oldest minor still in
# upstream support when this was written, and the newest the installed
# kubernetes-validate ships (its default).
K8S_VERSIONS = ("1.35.0", None)
# docs/DEPLOYING.md "Memory a worker needs": cache.max_bytes x networks x 1.25 + baseline.
BASELINE_MIB = 128


def _tool(name: str) -> str:
    """A console script of this venv (kubernetes-validate), or fail: it is a test extra."""
    exe = shutil.which(name) or str(Path(sys.executable).with_name(name))
    if not Path(exe).exists():
        pytest.fail(f"{name} is not installed: pip install '.[test]'")
    return exe


@cache
def _rendered() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip(
            "kubectl is not installed (Debian: apt-get install kubectl), so the "
            "kustomize overlay cannot be rendered"
        )
    result = subprocess.run(
        [kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def _docs() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(_rendered()) if d is not None]
    assert all(isinstance(d, dict) for d in docs)
    return docs


def _by_kind(kind: str, name: str = "rpc-gateway") -> dict[str, Any]:
    """The one object of ``kind`` (of that name, where the example Redis has one too)."""
    found = [d for d in _docs() if d["kind"] == kind]
    if len(found) > 1:
        found = [d for d in found if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _toml() -> dict[str, Any]:
    raw: dict[str, Any] = tomllib.loads(_by_kind("ConfigMap")["data"]["gateway.toml"])
    return raw


def _config() -> Config:
    return config_from_dict(_toml(), env={})


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = _by_kind("Deployment")["spec"]["template"]
    return pod


def _container() -> dict[str, Any]:
    containers = _pod()["spec"]["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def _mib(quantity: str) -> float:
    units = {"Ki": 1 / 1024, "Mi": 1.0, "Gi": 1024.0}
    for suffix, factor in units.items():
        if quantity.endswith(suffix):
            return float(quantity[: -len(suffix)]) * factor
    return float(quantity) / 2**20


@pytest.mark.parametrize("version", K8S_VERSIONS, ids=lambda v: v or "newest")
def test_the_overlay_passes_kubernetes_validate_strict(tmp_path: Path, version: str | None) -> None:
    out = tmp_path / "rendered.yaml"
    out.write_text(_rendered())
    cmd = [_tool("kubernetes-validate"), "--strict", "--quiet"]
    cmd += ["-k", version] if version else []
    result = subprocess.run([*cmd, str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert {d["kind"] for d in _docs()} == REQUIRED

    # The same tool on a manifest with one unknown field fails: it really checks.
    docs = _docs()
    next(d for d in docs if d["kind"] == "Deployment")["spec"]["replicaz"] = 3
    out.write_text(yaml.safe_dump_all(docs))
    result = subprocess.run([*cmd, str(out)], capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and "replicaz" in result.stdout + result.stderr


def test_nothing_real_is_overwritten_and_the_image_is_named() -> None:
    secret = _by_kind("Secret")
    name = secret["metadata"]["name"]
    assert name.startswith("rpc-gateway-redis-") and name != "rpc-gateway-redis"
    env = {e["name"]: e for e in _container()["env"]}
    assert env["GATEWAY_REDIS_URL"]["valueFrom"]["secretKeyRef"]["name"] == name
    assert "url" not in _toml().get("redis", {}), "the Redis URL belongs in the Secret"
    image = _container()["image"]
    registry, _, rest = image.partition("/")
    assert "." in registry and ":" in rest, f"{image}: no registry or tag"
    config = _by_kind("ConfigMap")["metadata"]["name"]
    volumes = {v["name"]: v for v in _pod()["spec"]["volumes"]}
    assert volumes["config"]["configMap"]["name"] == config != "rpc-gateway"  # hashed: rolls


def test_the_base_is_not_applied_alone() -> None:
    """The folders that hold manifests are the base and the overlay, nothing loose."""
    assert not list(K8S.glob("*.yaml")), "a loose manifest would be applied by -f deploy/k8s/"
    assert (K8S / "base" / "kustomization.yaml").is_file()
    assert not list((K8S / "base").glob("secret*")), "the base holds no Secret"


def test_selectors_match_the_pod_labels() -> None:
    deployment = _by_kind("Deployment")
    labels = _pod()["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert _by_kind("Service")["spec"]["selector"].items() <= labels.items()
    assert _by_kind("PodDisruptionBudget")["spec"]["selector"]["matchLabels"].items() <= (
        labels.items()
    )
    target = _by_kind("HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    hpa = _by_kind("HorizontalPodAutoscaler")["spec"]
    pdb = _by_kind("PodDisruptionBudget")["spec"]
    assert hpa["minReplicas"] > pdb["minAvailable"], "the PDB would block every drain"


def test_probes_point_at_routes_the_app_serves() -> None:
    app = create_app(_config())
    paths = {r.resource.canonical for r in app.router.routes() if r.resource is not None}
    container = _container()
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
        get = container[probe]["httpGet"]
        assert get["path"] == path
        assert get["path"] in paths, f"{probe} points at {get['path']}, not a route"
        assert get["port"] in ports


def test_ports_match_the_config_and_metrics_stay_out_of_the_service() -> None:
    cfg = _config()
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    assert ports["rpc"] == cfg.server.port
    host, _, port = cfg.server.metrics_listen.rpartition(":")
    assert ports["metrics"] == int(port)
    assert host == "0.0.0.0", "metrics must be reachable by the in-cluster scraper"
    annotations = _pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == port
    service = _by_kind("Service")["spec"]["ports"]
    assert [p["targetPort"] for p in service] == ["rpc"]
    assert int(port) not in {p["port"] for p in service}


def test_grace_period_outlasts_prestop_and_drain() -> None:
    cfg = _config()
    sleep = int(_container()["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert _pod()["spec"]["terminationGracePeriodSeconds"] > sleep + cfg.server.drain_timeout_s


def test_memory_follows_the_worker_formula() -> None:
    cfg = _config()
    need = cfg.cache.max_bytes / 2**20 * len(cfg.networks) * 1.25 + BASELINE_MIB
    need *= cfg.server.workers
    resources = _container()["resources"]
    assert _mib(resources["requests"]["memory"]) >= need
    assert _mib(resources["limits"]["memory"]) >= _mib(resources["requests"]["memory"])


def test_the_documented_command_is_the_overlay() -> None:
    for doc in (K8S / "README.md", ROOT / "docs" / "DEPLOYING.md"):
        text = doc.read_text()
        assert "kubectl apply -k deploy/k8s/overlays/example" in text, doc
        assert "kubectl apply -f deploy/k8s" not in text, doc
        assert 'prometheus.io/port: "8545"' not in text, doc


def test_compose_passes_the_compose_spec_schema() -> None:
    """The real compose-spec JSON schema, as vendored by check-jsonschema."""
    exe = shutil.which("check-jsonschema") or str(
        Path(sys.executable).with_name("check-jsonschema")
    )
    if not Path(exe).exists():
        pytest.fail("check-jsonschema is not installed: pip install '.[test]'")
    result = subprocess.run(
        [exe, "--builtin-schema", "vendor.compose-spec", str(ROOT / "compose.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_example_brings_its_own_redis_where_the_secret_points() -> None:
    """``kubectl apply -k`` alone comes up: the Secret's Redis exists, with a volume."""
    url = base64.b64decode(_by_kind("Secret")["data"]["url"]).decode()
    where = urlsplit(url)
    service = _by_kind("Service", "redis")
    assert where.hostname == service["metadata"]["name"]
    assert where.port in {p["port"] for p in service["spec"]["ports"]}
    redis = _by_kind("StatefulSet", "redis")
    pod_labels = redis["spec"]["template"]["metadata"]["labels"]
    assert service["spec"]["selector"].items() <= pod_labels.items()
    (claim,) = redis["spec"]["volumeClaimTemplates"]
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == "/data"
    assert "--appendonly" in container["args"], "without it a restart loses every key"
    # only the gateway pods reach it
    policy = _by_kind("NetworkPolicy", "redis")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= pod_labels.items()
    (rule,) = policy["ingress"]
    (peer,) = rule["from"]
    assert peer["podSelector"]["matchLabels"].items() <= _pod()["metadata"]["labels"].items()


def test_the_metrics_port_is_closed_to_all_but_prometheus() -> None:
    policy = _by_kind("NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= _pod()["metadata"]["labels"].items()
    assert policy["policyTypes"] == ["Ingress"]
    by_port = {rule["ports"][0]["port"]: rule for rule in policy["ingress"]}
    assert set(by_port) == {"rpc", "metrics"}
    assert "from" not in by_port["rpc"], "the RPC port is for everyone"
    peers = by_port["metrics"]["from"]
    assert peers and all("podSelector" in p for p in peers), "metrics: Prometheus only"
    names = {p["name"] for p in _container()["ports"]}
    assert set(by_port) <= names


def test_trusted_proxies_are_narrow() -> None:
    """A wide range would let any pod in it set the client IP an allowlist checks."""
    for net in _config().server.trusted_proxies:
        network = ipaddress.ip_network(net)
        assert network.prefixlen >= (24 if network.version == 4 else 64), net


def test_every_network_says_where_its_websocket_nodes_are() -> None:
    """Subscriptions need a WebSocket URL; the HTTP-only public endpoints refuse one.
    The example shows the node table's ``ws_url`` beside each node that has one."""
    raw = _toml()["networks"]
    cfg = _config()
    for net in cfg.networks:
        tables = [e for e in raw[net.name]["upstreams"] if isinstance(e, dict)]
        with_ws = [e for e in tables if e.get("ws_url")]
        assert with_ws, f"{net.name}: no node with a ws_url"
        assert all(e["ws_url"].startswith("wss://") for e in with_ws)
        assert all(e.get("name") for e in tables), "named nodes: logs never show a URL"
        assert {e["ws_url"] for e in with_ws} <= set(net.ws_upstreams)
