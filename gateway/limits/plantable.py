"""The plans as the admission scripts' ARGV, and what a request costs.

One builder for ``admit.lua`` and ``lease.lua`` (their shared ARGV layout is
written down in ``keyrecord.lua``): each plan's name, rate, burst and daily
quota are rendered once; only the cost of the request in hand varies, and
the common one-call requests are cached per method.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gateway.config import PlanConfig


class PlanTable:
    """The plans as the scripts' ARGV (``keyrecord.lua``): rendered once, cost per request.

    The one builder of that layout for both ``admit.lua`` and ``lease.lua``.
    Lists handed out may be cached and shared: callers copy, never mutate.
    """

    def __init__(self, plans: Sequence[PlanConfig]) -> None:
        self._plans = tuple(plans)
        self._fixed = [(p.name, _num(p.rate), str(p.burst), str(p.daily_quota)) for p in plans]
        self._groups: dict[str, list[str]] = {}
        self._admit: dict[str, list[str]] = {}

    def groups(self, calls: int, methods: Mapping[str, int]) -> list[str]:
        """ARGV[6...]: plan count, then each plan's group with this request's cost."""
        method = _single(methods)
        if method is None:
            return self._build(calls, methods)
        cached = self._groups.get(method)
        if cached is None:
            cached = self._build(calls, methods)
            if len(self._groups) < 1024:
                self._groups[method] = cached
        return cached

    def admit_args(self, calls: int, methods: Mapping[str, int]) -> list[str]:
        """``groups`` followed by admit.lua's method/count pairs."""
        method = _single(methods)
        cached = None if method is None else self._admit.get(method)
        if cached is not None:
            return cached
        out = list(self.groups(calls, methods))
        for name, count in methods.items():
            out.append(name)
            out.append(str(count))
        if method is not None and len(self._admit) < 1024:
            self._admit[method] = out
        return out

    def call_groups(self, per_call: Sequence[str]) -> list[str]:
        """ARGV[6...] for a batch admitted call by call: each plan's cost of each call.

        The cost field is the calls' costs in order, comma-separated
        (``keyrecord.lua`` ``cost_list``), never cached: batches vary.
        """
        out = [str(len(self._plans))]
        for plan, fixed in zip(self._plans, self._fixed, strict=True):
            out.extend(fixed)
            out.append(call_costs(plan.cost, per_call))
        return out

    def call_admit_args(self, per_call: Sequence[str]) -> list[str]:
        """``call_groups`` followed by one method/count pair per call, in order."""
        out = self.call_groups(per_call)
        for name in per_call:
            out.append(name)
            out.append("1")
        return out

    def _build(self, calls: int, methods: Mapping[str, int]) -> list[str]:
        out = [str(len(self._plans))]
        for plan, fixed in zip(self._plans, self._fixed, strict=True):
            out.extend(fixed)
            out.append(str(request_cost(plan, calls, methods)))
        return out


def _single(methods: Mapping[str, int]) -> str | None:
    """The method of a one-call request (the cacheable case), else None."""
    if len(methods) == 1:
        ((method, count),) = methods.items()
        if count == 1:
            return method
    return None


def request_cost(plan: PlanConfig, calls: int, methods: Mapping[str, int]) -> int:
    """Units a request costs on ``plan``: at least one, except a probe (``is_probe``).

    Nothing is free: a body the gateway answers itself still costs one unit.
    """
    if is_probe(calls, methods):
        return 0
    return max(1, sum(plan.cost(m) * n for m, n in methods.items()))


def call_costs(cost: Callable[[str], int], per_call: Sequence[str]) -> str:
    """Each call's units, comma-separated; a request costs at least one unit in all.

    The floor goes on the first call, so a batch of zero-weight calls (a
    plan may price a method 0) still costs the unit every request costs.
    """
    units = [cost(m) for m in per_call]
    if units and sum(units) < 1:
        units[0] = 1
    return ",".join(map(str, units))


def is_probe(calls: int, methods: Mapping[str, int]) -> bool:
    """No calls and no methods: a key check that charges nothing.

    Only the WebSocket upgrade asks this way (every call and every
    notification on the socket costs units, opening it does not); an HTTP
    request always counts at least one call, so it always costs a unit.
    """
    return calls == 0 and not methods


def _num(value: float) -> str:
    return str(int(value)) if value == int(value) else repr(value)
