"""CPU of each part: the arithmetic (no I/O) and the /proc and INFO readers."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from bench import partcpu
from bench import report as rpt
from bench import verdicts as v
from gateway.redis.embedded import RedisProcess
from tests.helpers.benchfakes import fake_result

INFO = "# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9.0\r\n"


def test_parse_info_cpu_sums_sys_and_user_not_children() -> None:
    assert v.parse_info_cpu(INFO) == pytest.approx(3.75)
    assert v.parse_info_cpu("# CPU\r\nused_cpu_sys:1\r\n") is None
    assert v.parse_info_cpu("used_cpu_sys:x\nused_cpu_user:1") is None


def test_counter_and_tick_deltas() -> None:
    # a part that appeared mid-run is skipped; one that restarted counts from 0
    assert v.counter_delta({"a": 1.0, "b": 5.0}, {"a": 3.5, "b": 0.5, "c": 9.0}) == {
        "a": 2.5,
        "b": 0.5,
    }
    ticks = v.ticks_delta({0: (100, 400), 1: (0, 400)}, {0: (190, 500), 1: (25, 500)})
    assert ticks == {0: (90, 100), 1: (25, 100)}
    assert v.busy_pct(ticks) == {0: 90.0, 1: 25.0}
    assert v.busy_pct({0: (0, 0)}) == {}


def test_cpu_rows_percent_of_a_core_and_us_per_answer() -> None:
    rows = v.cpu_rows(
        {"gateway worker 1": 4.0, "redis-server": 0.5}, 5.0, 20_000, {"redis-server": (1,)}
    )
    assert rows[0] == {
        "part": "gateway worker 1",
        "cpu_s": 4.0,
        "core_pct": 80.0,
        "us_per_req": 200.0,
        "cpus": None,
    }
    assert rows[1]["core_pct"] == 10.0 and rows[1]["us_per_req"] == 25.0
    assert rows[1]["cpus"] == [1]
    assert v.cpu_rows({"x": 1.0}, 0.0, 0)[0]["core_pct"] is None
    assert v.per_request_us(None, 10) is None and v.per_request_us(1.0, 0) is None


def _row(part: str, pct: float, cpus: list[int] | None = None) -> dict[str, object]:
    return {"part": part, "core_pct": pct, "cpus": cpus}


def test_at_limit_names_a_single_busy_part() -> None:
    rows = [_row("gateway worker 1", 97.0, [0]), _row("redis-server", 40.0, [1])]
    assert v.at_limit(rows) == "gateway worker 1 at 97% of a core"


def test_at_limit_names_a_saturated_cpu_set() -> None:
    rows = [
        _row("redis-server", 45.0, [1]),
        _row("mocknode-56-0", 30.0, [1]),
        _row("load generator 1", 20.0, [1]),
        _row("gateway worker 1", 60.0, [0]),
    ]
    text = v.at_limit(rows)
    assert text.startswith("CPU 1 saturated by its 3 pinned parts (95% of 100%")
    assert "busiest redis-server 45%" in text
    # two workers on two CPUs at 89% + 89% do not fill {0, 1}
    two = [_row("w1", 89.0, [0, 1]), _row("w2", 89.0, [0, 1])]
    assert v.at_limit(two).startswith("none saturated (busiest: w1 at 89%")


def test_at_limit_blames_other_processes_when_the_cpu_is_busy_but_not_ours() -> None:
    rows = [_row("gateway worker 1", 40.0, [0]), _row("redis-server", 10.0, [1])]
    assert v.at_limit(rows, {0: 99.0, 1: 50.0}) == (
        "CPU 0 saturated by other processes: 99% busy, ours 40% of it"
    )
    both = v.at_limit(rows, {0: 99.0, 1: 95.0})
    assert both == (
        "CPU 0 saturated by other processes: 99% busy, ours 40% of it; "
        "CPU 1 saturated by other processes: 95% busy, ours 10% of it"
    )
    unpinned = [_row("gateway", 40.0)]
    assert v.at_limit(unpinned, {0: 95.0, 1: 93.0}) == "the machine: all CPUs 94% busy"
    assert v.at_limit(unpinned, {0: 50.0, 1: 50.0}).startswith("none saturated")
    assert v.at_limit([]).startswith("unknown")


def test_summarize_lists_each_part_and_redis_per_admitted_request() -> None:
    ok = [(i / 100, "ok", 0.001) for i in range(900)]
    r1 = fake_result(ok + [(9.5, "http_429", 0.001)] * 100, duration=10.0)
    r2 = fake_result(ok + [(9.5, "http_429", 0.001)] * 100, duration=10.0)
    for res in (r1, r2):
        res.parts_cpu_s = {"gateway worker 1": 9.5, "redis-server": 0.9}
        res.parts_cpus = {"gateway worker 1": (0,), "redis-server": (1,)}
        res.cpu_ticks = {0: (98, 100), 1: (50, 100)}
        res.redis_info_cpu_s = 0.45
    s = rpt.summarize([r1, r2])
    rows = {r["part"]: r for r in s["cpu_by_part"]}
    assert rows["gateway worker 1"]["cpu_s"] == 19.0
    assert rows["gateway worker 1"]["core_pct"] == pytest.approx(95.0)
    assert rows["gateway worker 1"]["us_per_req"] == pytest.approx(19.0e6 / 2000)
    assert "load generator 1" in rows
    assert s["at_limit"] == "gateway worker 1 at 95% of a core"
    assert s["cpu_busy_pct"] == {"0": 98.0, "1": 50.0}
    assert s["admitted"] == 1800  # 429s are not admitted
    assert s["redis_cpu_us_per_admitted"] == pytest.approx(0.9e6 / 1800)
    md = rpt.render_markdown({"scenario": "steady", "targets": {"gateway": s}})
    assert "## CPU by part" in md and "| gateway | redis-server | 1 | 1.80 | 9 | 900.0 |" in md
    assert "at its limit: **gateway worker 1 at 95% of a core**" in md
    assert "Redis CPU per admitted request (INFO cpu): **500.0 µs** over 1,800 admitted" in md
    r2.redis_info_cpu_s = None  # one round without INFO: no figure rather than a wrong one
    assert rpt.summarize([r1, r2])["redis_cpu_us_per_admitted"] is None


def test_readers_see_real_cpu() -> None:
    before = partcpu.pid_cpu_seconds(os.getpid())
    end = time.process_time() + 0.05
    while time.process_time() < end:
        pass
    after = partcpu.pid_cpu_seconds(os.getpid())
    assert before is not None and after is not None and after - before >= 0.03
    assert partcpu.pid_cpu_seconds(2**22 + 7) is None
    ticks = partcpu.cpu_busy()
    assert ticks and all(0 <= busy <= total for busy, total in ticks.values())


async def test_redis_info_cpu_from_a_real_redis(tmp_path: Path) -> None:
    # the bench stack's Redis listens on loopback TCP (the shared test Redis
    # is a unix socket), so this starts one the same way
    server = RedisProcess(tmp_path, persist=False, tcp=True)
    server.start()
    try:
        used = await partcpu.redis_info_cpu(server.port)
    finally:
        server.stop()
    assert used is not None and used > 0
    from bench.stack import free_port

    assert await partcpu.redis_info_cpu(free_port()) is None  # nothing listening


def test_commandstats_are_parsed_and_subtracted() -> None:
    text = (
        "# Commandstats\r\n"
        "cmdstat_evalsha:calls=10,usec=250,usec_per_call=25.00,rejected_calls=0,failed_calls=0\r\n"
        "cmdstat_hincrby:calls=4,usec=8,usec_per_call=2.00\r\n"
        "cmdstat_broken:calls=x,usec=1\r\n"
        "not_a_stat:1\r\n"
    )
    before = v.parse_commandstats(text)
    assert before == {"evalsha": (10, 250), "hincrby": (4, 8)}
    after = {"evalsha": (25, 700), "hincrby": (4, 8), "xadd": (3, 9)}
    assert v.commands_delta(before, after) == {"evalsha": (15, 450), "xadd": (3, 9)}


async def test_redis_commandstats_count_what_a_real_redis_ran(tmp_path: Path) -> None:
    server = RedisProcess(tmp_path, persist=False, tcp=True)
    server.start()
    try:
        before = await partcpu.redis_commandstats(server.port)
        for _ in range(3):
            assert await partcpu.redis_info(server.port, "server") is not None
        after = await partcpu.redis_commandstats(server.port)
    finally:
        server.stop()
    ran = v.commands_delta(before, after)
    assert ran["info"][0] == 4  # three INFO server, one INFO commandstats between
    from bench.stack import free_port

    assert await partcpu.redis_commandstats(free_port()) == {}
