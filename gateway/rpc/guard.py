"""The ``eth_getLogs`` range guard, run before admission whenever the plan is known.

A call the gateway refuses by its own guard costs the minimum compute unit,
not the method's weight (one refused call drained a free
key's burst). The weight is decided in the admission call, so the guard has
to run before it, and its limit depends on the key's plan. When every plan
has the same limit (the default) that is exact; otherwise the plan each key
was last admitted with in this process is remembered (a bounded map) and
used, and the guard runs again after admission with the plan the decision
names, so a plan switch is never judged on the old plan's limit (such a
call, and a key's first call in a process, are charged the full weight).
A refused call is marked -32602 here and so is not counted as its method.
"""

from __future__ import annotations

from gateway.config import Config
from gateway.intel.head import HeadTracker
from gateway.intel.logsguard import check_logs_range
from gateway.rpc import protocol as rpc
from gateway.rpc.replies import ParsedRequest

_REMEMBER = 8192  # keys whose plan is remembered; the map is emptied when full
GETLOGS = "eth_getLogs"


class LogsGuard:
    """One network's guard; ``heads``: its node pool's head (a range's ``latest``)."""

    def __init__(self, cfg: Config, heads: HeadTracker) -> None:
        self.cfg = cfg
        self.heads = heads
        limits = {cfg.max_logs_range(p.name) for p in cfg.plans}
        limits.add(cfg.limits.max_logs_range)  # a fail-open admission names no plan
        self.uniform = limits.pop() if len(limits) == 1 else None
        self._plans: dict[str, str] = {}

    def before(self, req: ParsedRequest, khash: str) -> None:
        """Refuse a too-wide range now, when the limit is known without asking Redis."""
        calls = req.calls
        if len(calls) == 1:  # the common single call: one comparison
            if calls[0].method != GETLOGS:
                return
        elif not any(c.method == GETLOGS for c in calls):
            return
        limit = self.uniform
        if limit is None:
            plan = self._plans.get(khash)
            if plan is None:
                return
            limit = self.cfg.max_logs_range(plan)
        req.guarded = limit
        self._check(req, limit)

    def learned(self, khash: str, plan: str) -> None:
        """Remember the plan an admitted key has (only when plans differ in their limit)."""
        if self.uniform is None and self._plans.get(khash) != plan:
            if len(self._plans) >= _REMEMBER:
                self._plans.clear()
            self._plans[khash] = plan

    def after(self, req: ParsedRequest) -> None:
        """After admission: the limit of the plan the decision named, if not judged so yet."""
        if self.uniform is not None or not any(c.method == GETLOGS for c in req.calls):
            return  # judged before admission already, or nothing to judge
        limit = self.cfg.max_logs_range(req.plan)
        if req.guarded != limit:
            self._check(req, limit)

    def _check(self, req: ParsedRequest, limit: int) -> None:
        for call in req.calls:
            if call.error is None and call.method == GETLOGS:
                data = check_logs_range(call.params, self.heads, limit)
                if data is not None:
                    call.error, call.reason = rpc.INVALID_PARAMS, data
