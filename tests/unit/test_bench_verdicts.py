"""Verdict arithmetic: token-bucket expectations, ratios, windows, scenario checks."""

from __future__ import annotations

import math

import pytest

from bench import verdicts as v
from bench.scenarios.faults import outage_verdict, redis_verdict
from bench.scenarios.limits import burst_checks, burst_figures, many_keys_verdict
from bench.scenarios.revoke import revoke_verdict
from tests.helpers.benchfakes import START, fake_result


def test_theoretical_burst_count() -> None:
    assert v.theoretical_admitted(25, 50, 10) == 300
    assert v.theoretical_admitted(300, 600, 0) == 600
    with pytest.raises(ValueError):
        v.theoretical_admitted(-1, 50, 1)


def test_expected_admitted_caps_at_offered_and_divides_by_cost() -> None:
    assert v.expected_admitted(100, 25, 50, 10) == 100  # under the limit: all of it
    assert v.expected_admitted(1000, 25, 50, 10) == 300
    assert v.expected_admitted(1000, 25, 50, 10, cost=10) == 30  # batches of 10 calls


def test_ratio_and_within() -> None:
    assert v.ratio(3, 4) == 0.75
    assert v.ratio(1, 0) is None and v.ratio(None, 2) is None
    assert v.within(105, 100, 0.05) and not v.within(106, 100, 0.05)
    assert v.within(3, 2.5, 0.01)  # absolute slack of one request
    assert not v.within(None, 1, 0.5)


def test_windows_and_times() -> None:
    timeline = {(0, "ok"): 5, (10, "http_503"): 2, (25, "http_503"): 1, (30, "ok"): 4}
    step = 0.1
    assert v.window_counts(timeline, step, 0.0, 1.0) == {"ok": 5}
    assert v.window_counts(timeline, step, 1.0, math.inf) == {"http_503": 3, "ok": 4}
    assert v.error_fraction({"ok": 3, "http_503": 1}) == 0.25
    assert v.error_fraction({}) == 0.0
    assert v.last_time(timeline, step, ["http_503"]) == pytest.approx(2.6)
    assert v.first_time(timeline, step, ["ok"], after=0.5) == pytest.approx(3.0)
    assert v.first_time(timeline, step, ["nothing"]) is None
    assert v.verdict([]) == {"pass": None, "checks": []}


def test_send_window_and_kept_up() -> None:
    first = {"ok": 10.0, "http_429": 10.5, "not_sent": 9.0}
    last = {"ok": 19.0, "http_429": 20.0, "not_sent": 23.0}
    assert v.send_window(first, last) == 10.0  # unsent requests do not stretch it
    assert v.kept_up({"ok": 5, "http_429": 3})["pass"]
    overloaded = v.kept_up({"ok": 5, "not_sent": 2})
    assert not overloaded["pass"] and "not_sent" in overloaded["detail"]


def test_side_by_side_ratios() -> None:
    gw = {"throughput_rps": 2000.0, "ok_rps": 2000.0, "latency_ms": {"p50_ms": 2.0}}
    base = {"throughput_rps": 4000.0, "ok_rps": 4000.0, "latency_ms": {"p50_ms": 1.0}}
    r = v.side_by_side_ratios(gw, base)
    assert r["throughput_rps"] == 0.5 and r["p50_ms"] == 2.0 and r["p99_ms"] is None


def burst_run(admitted: int, sent: int = 500, missing_retry_after: int = 0) -> dict[str, object]:
    events = [
        (i * 0.01, "ok" if i < admitted else "http_429", 0.002) for i in range(sent)
    ]  # 100 req/s over 4.99 s
    res = fake_result(events, retry_after=sent - admitted - missing_retry_after)
    return burst_figures(res, rate=25, bucket=50, batch=1)


def test_burst_figures_and_checks() -> None:
    fig = burst_run(admitted=175)
    assert fig["window t (s, first to last send)"] == pytest.approx(4.99)
    assert fig["theoretical burst + rate*t"] == pytest.approx(50 + 25 * 4.99)
    assert fig["admitted / theoretical"] == pytest.approx(175 / 174.75)
    assert all(c["pass"] for c in burst_checks(fig, 0.05))
    too_many = burst_checks(burst_run(admitted=250), 0.05)
    assert [c["pass"] for c in too_many] == [False, True, True]
    no_header = burst_checks(burst_run(admitted=175, missing_retry_after=3), 0.05)
    assert [c["pass"] for c in no_header] == [True, True, False]


def test_many_keys_verdict_flags_a_starved_key() -> None:
    # 4 keys, 40 req/s each for 5 s through real token buckets (25/s, burst 50);
    # key 3's bucket is wrongly half as big and half as fast
    events, keys = [], {}
    tokens = [50.0, 50.0, 50.0, 25.0]
    last = [0.0] * 4
    for i in range(800):
        key, t = i % 4, i / 160
        rate, cap = (25.0, 50.0) if key != 3 else (12.5, 25.0)
        tokens[key] = min(cap, tokens[key] + (t - last[key]) * rate)
        last[key] = t
        admitted = tokens[key] >= 1
        tokens[key] -= admitted
        keys[i] = key
        events.append((t, "ok" if admitted else "http_429", 0.001))
    res = fake_result(events, keys_of=keys)
    figures, checks = many_keys_verdict(res, 4, rate=25, bucket=50, batch=1, tolerance=0.1)
    assert figures["keys outside tolerance"] == 1
    assert [c["pass"] for c in checks] == [True, False, True]
    assert "key #3" in checks[1]["detail"]


def test_revoke_verdict() -> None:
    # revoke command from t=3.0 to t=3.3; 401s from t=3.2 on
    events = [(i * 0.01, "ok" if i * 0.01 < 3.2 else "http_401", 0.002) for i in range(600)]
    res = fake_result(events)
    figures, checks = revoke_verdict(res, START + 3.0, START + 3.3, max_ms=1000)
    assert figures["first 401, ms after the command started"] == pytest.approx(202, abs=1)
    assert figures["last admitted request sent, ms after the command returned"] == pytest.approx(
        -110, abs=1
    )
    assert all(c["pass"] for c in checks)
    late = fake_result([(i * 0.01, "ok" if i < 450 else "http_401", 0.002) for i in range(600)])
    _, checks = revoke_verdict(late, START + 3.0, START + 3.3, max_ms=1000)
    assert checks[1]["pass"] is False  # admitted until 4.49 s: 1190 ms after


def test_outage_verdict() -> None:
    def kind(t: float) -> str:
        return "http_502" if 3.0 <= t < 3.05 else "ok"

    events = [(i * 0.002, kind(i * 0.002), 0.001) for i in range(6000)]  # 500/s, 12 s
    res = fake_result(events, duration=12.0)
    figures, checks = outage_verdict(res, 3.0, 6.0, max_error_rate=0.01, settle_s=2.0)
    assert figures["errors from failure to recovery+settle"] == 25
    assert figures["error rate from failure to recovery+settle"] == pytest.approx(25 / 2500)
    assert figures["last error, s after the failure"] == pytest.approx(0.06, abs=0.011)
    assert [c["pass"] for c in checks] == [True, True]
    _, strict = outage_verdict(res, 3.0, 6.0, max_error_rate=0.001, settle_s=2.0)
    assert strict[0]["pass"] is False


def test_redis_verdict() -> None:
    def kind(t: float) -> str:
        return "http_503" if 3.0 <= t < 6.2 else "ok"

    events = [(i * 0.004, kind(i * 0.004), 0.001) for i in range(3000)]
    res = fake_result(events, duration=12.0)
    figures, checks = redis_verdict(res, 3.0, 6.0, max_recovery_s=5.0, alive=True)
    assert figures["first error, ms after redis went down"] == pytest.approx(0, abs=11)
    assert figures["last error, ms after redis came back"] == pytest.approx(200, abs=11)
    assert figures["first 2xx, ms after redis came back"] == pytest.approx(200, abs=11)
    assert figures["error kinds while down"].startswith("http_503=")
    assert all(c["pass"] for c in checks)
    _, checks = redis_verdict(res, 3.0, 6.0, max_recovery_s=0.1, alive=False)
    assert [c["pass"] for c in checks] == [False, False]
