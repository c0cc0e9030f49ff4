"""deploy/k8s/ checked without a cluster, and compose.yaml by a real schema tool.

No Kubernetes API server runs here, so this reads the manifests the way the
API server would reject them at the shape level: every file parses, carries
``apiVersion``/``kind``/``metadata.name``, the selectors match the pod
labels, probes point at routes the real app serves, container ports match the
ConfigMap's ``gateway.toml`` (loaded by the real config loader), and the
termination grace period outlasts the preStop sleep plus the drain.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.app import create_app
from gateway.config import Config, config_from_dict

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
REQUIRED = {"ConfigMap", "Deployment", "Service", "PodDisruptionBudget", "HorizontalPodAutoscaler"}


def _docs() -> list[dict[str, Any]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            assert isinstance(doc, dict), f"{path.name}: not a mapping"
            docs.append(doc)
    return docs


def _by_kind(kind: str) -> dict[str, Any]:
    found = [d for d in _docs() if d["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, found {len(found)}"
    return found[0]


def _config() -> Config:
    import tomllib

    text = _by_kind("ConfigMap")["data"]["gateway.toml"]
    return config_from_dict(tomllib.loads(text), env={})


def _container() -> dict[str, Any]:
    spec = _by_kind("Deployment")["spec"]["template"]["spec"]
    containers = spec["containers"]
    assert len(containers) == 1
    container: dict[str, Any] = containers[0]
    return container


def test_every_manifest_has_the_basic_shape() -> None:
    docs = _docs()
    assert {d["kind"] for d in docs} >= REQUIRED
    for doc in docs:
        assert isinstance(doc.get("apiVersion"), str) and doc["apiVersion"]
        assert doc["metadata"]["name"] == "rpc-gateway" or doc["kind"] == "Secret"


def test_selectors_match_the_pod_labels() -> None:
    deployment = _by_kind("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
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


def test_ports_match_the_config() -> None:
    cfg = _config()
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    assert ports["rpc"] == cfg.server.port
    host, _, port = cfg.server.metrics_listen.rpartition(":")
    assert ports["metrics"] == int(port)
    assert host == "0.0.0.0", "metrics must be reachable by the in-cluster scraper"
    service_ports = {p["name"]: p["targetPort"] for p in _by_kind("Service")["spec"]["ports"]}
    assert set(service_ports.values()) <= set(ports)


def test_grace_period_outlasts_prestop_and_drain() -> None:
    cfg = _config()
    spec = _by_kind("Deployment")["spec"]["template"]["spec"]
    sleep = int(_container()["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert spec["terminationGracePeriodSeconds"] > sleep + cfg.server.drain_timeout_s


def test_the_redis_url_comes_from_a_secret_not_the_configmap() -> None:
    env = {e["name"]: e for e in _container()["env"]}
    assert "secretKeyRef" in env["GATEWAY_REDIS_URL"]["valueFrom"]
    assert "url" not in _config_redis_table()


def _config_redis_table() -> dict[str, Any]:
    import tomllib

    raw = tomllib.loads(_by_kind("ConfigMap")["data"]["gateway.toml"])
    table: dict[str, Any] = raw.get("redis", {})
    return table


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
