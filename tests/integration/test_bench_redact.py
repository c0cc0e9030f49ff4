"""bench never writes an API key or URL credentials into a report.

A review found ``--key`` and the password in ``--target`` copied into the
JSON, the Markdown and stdout. The end-to-end test runs the real ``python -m
bench steady`` against a real mock node given as ``--target`` and searches
every output for the secrets.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.redact import redact_argv, redact_key, redact_report, redact_url, secrets_of

KEY = "Zq8vK3mN5pR7tW9yB2dF4hJ6"
PASSWORD = "hunter2-Pa55word"


def test_redact_key_keeps_four_characters() -> None:
    assert redact_key(KEY) == "Zq8v…"
    assert redact_key("abc") == "***"


def test_redact_url_userinfo_path_key_and_query() -> None:
    assert redact_url(f"https://alice:{PASSWORD}@rpc.example.com:8443/bsc") == (
        "https://***@rpc.example.com:8443/bsc"
    )
    assert redact_url(f"https://{KEY}@rpc.example.com/") == "https://***@rpc.example.com/"
    assert redact_url(f"https://rpc.example.com/bsc/{KEY}") == "https://rpc.example.com/bsc/***"
    assert redact_url(f"https://h.example/v1?apikey={KEY}&chain=56") == (
        "https://h.example/v1?apikey=%2A%2A%2A&chain=56"
    )
    assert redact_url("http://127.0.0.1:8545/bsc") == "http://127.0.0.1:8545/bsc"
    assert redact_url("http://[::1]:9/opbnb") == "http://[::1]:9/opbnb"


def test_redact_argv_masks_key_flags_and_urls() -> None:
    argv = ["steady", "--key", KEY, f"--key={KEY}", "--target", f"http://u:{PASSWORD}@h:1"]
    assert redact_argv(argv) == [
        "steady", "--key", "Zq8v…", "--key=Zq8v…", "--target", "http://***@h:1",
    ]  # fmt: skip


def test_redact_report_deep_with_known_secrets() -> None:
    secrets = secrets_of([KEY], f"http://user:{PASSWORD}@h:1")
    report = {
        "notes": [f"used {KEY}", f"password {PASSWORD} in a message"],
        "params": {"target": f"http://user:{PASSWORD}@h:1", "rate": 5.0},
        KEY: (1, 2),
    }
    out = redact_report(report, secrets)
    text = repr(out)
    assert KEY not in text and PASSWORD not in text
    assert out["params"]["rate"] == 5.0
    assert out["notes"][0] == "used Zq8v…"


@pytest.mark.slow
def test_bench_reports_carry_no_secret(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    node = subprocess.Popen(
        [sys.executable, "-m", "bench.mocknode", "--port", "0", "--block-time", "0"],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert node.stdout is not None
        node_url = node.stdout.readline().strip()
        host_port = node_url.split("://", 1)[1]
        target = f"http://bench:{PASSWORD}@{host_port}"
        out = subprocess.run(
            [sys.executable, "-m", "bench", "steady", "--target", target, "--key", KEY,
             "--duration", "1s", "--rate", "20", "--connections", "2", "--no-plot",
             "--out-dir", str(tmp_path), "--max-error-rate", "1"],
            capture_output=True, text=True, env=env, timeout=120,
        )  # fmt: skip
    finally:
        node.terminate()
        node.wait(timeout=10)
        if node.stdout is not None:
            node.stdout.close()
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr
    outputs = {"stdout": out.stdout, "stderr": out.stderr}
    for path in tmp_path.iterdir():
        if path.suffix in (".json", ".md"):
            outputs[path.name] = path.read_text()
    assert any(name.endswith(".json") for name in outputs), outputs.keys()
    assert any(name.endswith(".md") for name in outputs), outputs.keys()
    for name, text in outputs.items():
        assert KEY not in text, name
        assert PASSWORD not in text, name
    assert "Zq8v…" in outputs["stdout"]  # the redacted form is there instead
