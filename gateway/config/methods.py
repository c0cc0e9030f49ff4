"""A network's offered methods from its TOML table: names, patterns, weights, refusals.

``methods`` (replaces the default list) and ``extra_methods`` (adds to it)
take method names or prefix patterns (``"debug_trace*"``); ``extra_methods``
may also be a table of name or pattern = compute units, so an operator who
runs trace-capable nodes offers ``debug_trace*`` with its weight in one
line. Whatever the config says, nothing that administers the node or signs
with its keys is offered (defaults.py), and a pattern that could reach such
a method is refused at load with the config path in the message.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from gateway.config.defaults import (
    BSC_CHAIN_IDS,
    BSC_METHODS,
    DEFAULT_METHODS,
    FILE_METHODS,
    FORBIDDEN_DEBUG_METHODS,
    FORBIDDEN_METHOD_PREFIXES,
    UNOFFERED_METHODS,
)
from gateway.config.methodset import FILE_SUFFIXES, MethodSet
from gateway.config.schema import ConfigError

# A JSON-RPC method name as nodes define them (namespace_name), optionally a
# trailing "*" for "every method starting with this".
_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}\*?\Z")


class ExtraWeights:
    """The weights the networks' ``extra_methods`` tables give, merged into every plan.

    Weights live in plans (the limiter charges per plan); a method offered
    with a weight on one network gets that weight in each plan that does not
    set its own. Two networks giving one method two weights is refused,
    since one plan can charge only one.
    """

    def __init__(self) -> None:
        self.weights: dict[str, int] = {}
        self._where: dict[str, str] = {}

    def add(self, method: str, units: int, path: str) -> None:
        known = self.weights.get(method)
        if known is not None and known != units:
            raise ConfigError(
                f"{path}: weight {units} differs from {self._where[method]}'s {known}; "
                "set it per plan in plans.<name>.weights instead"
            )
        self.weights[method] = units
        self._where[method] = path


# A poll is never a free scan (its weight stands for the node reads it makes).
NEVER_FREE: Final = frozenset({"eth_getFilterChanges", "eth_getFilterLogs", "eth_getLogs"})


def merge_weights(
    shipped: Mapping[str, int], extra: Mapping[str, int], plan: Mapping[str, int]
) -> dict[str, int]:
    """A plan's weights: the shipped ones, then the networks' extra methods, then its own.

    An operator's ``prefix*`` weight covers the shipped exact names under it
    (``"debug_trace*" = 500`` prices ``debug_traceCall`` 500 too, not the
    shipped 14) unless the operator names them as well. ``eth_getFilterLogs``
    scans what the ``eth_getLogs`` it stands for scans, so a plan that prices
    ``eth_getLogs`` its own way prices it alike unless it names it;
    ``eth_getFilterChanges`` reads only the blocks since the last poll and
    keeps its own weight.
    """
    merged = dict(shipped)
    for layer in (extra, plan):
        for name in layer:
            if name.endswith("*"):
                prefix = name[:-1]
                for known in [m for m in merged if m.startswith(prefix) and m != name]:
                    if known not in extra and known not in plan:
                        del merged[known]
        merged.update(layer)
    if "eth_getLogs" in plan and "eth_getFilterLogs" not in plan:
        merged["eth_getFilterLogs"] = merged["eth_getLogs"]
    return merged


def default_methods(chain_id: int) -> list[str]:
    """The shipped method list of a network on chain ``chain_id``."""
    names = list(DEFAULT_METHODS)
    if chain_id in BSC_CHAIN_IDS:
        names.extend(BSC_METHODS)
    return names


def refusal(method: str) -> str | None:
    """Why ``method`` (a name or a ``prefix*`` pattern) may never be offered, or None.

    Compared without case: geth matches names exactly, but other nodes need
    not, and no spelling of a closed name is worth offering.
    """
    name = method.lower()
    if name.endswith("*"):
        prefix = name[:-1]
        for closed in FORBIDDEN_METHOD_PREFIXES:
            if closed.lower().startswith(prefix) or prefix.startswith(closed.lower()):
                return f"the pattern reaches {closed}*, which is never offered"
        for closed in (*FORBIDDEN_DEBUG_METHODS, *UNOFFERED_METHODS):
            if closed.lower().startswith(prefix):
                return f"the pattern reaches {closed}, which is never offered"
        for closed in FILE_METHODS:
            # "debug_trace*" stays offerable (every pattern skips the file
            # methods at run time); one that reaches into a file method's own
            # name ("debug_traceBlockF*") or names the file part is aimed at it
            stem = len(closed) - len(_file_suffix(closed))
            if closed.lower().startswith(prefix) and len(prefix) > stem:
                return f"the pattern reaches {closed}, {_FILE_WHY}"
        if any(part in prefix for part in FILE_SUFFIXES):
            return f"the pattern reaches methods ending in FromFile/ToFile, {_FILE_WHY}"
        return None
    if name.startswith(_CLOSED_PREFIXES) or name in _CLOSED_DEBUG:
        return "node administration and server-side signing are never offered"
    if name.endswith(FILE_SUFFIXES):
        return _FILE_WHY
    if name in _UNOFFERED:
        return "the gateway keeps filters itself and has no pending-transaction filter"
    return None


_FILE_WHY = "it makes the node read or write a file the caller names"


def _file_suffix(name: str) -> str:
    """The ``FromFile`` / ``ToFile`` ending of a file method's name."""
    lower = name.lower()
    return next(name[-len(s) :] for s in FILE_SUFFIXES if lower.endswith(s))


_CLOSED_PREFIXES = tuple(p.lower() for p in FORBIDDEN_METHOD_PREFIXES)
_CLOSED_DEBUG = frozenset(m.lower() for m in FORBIDDEN_DEBUG_METHODS)
_UNOFFERED = frozenset(m.lower() for m in UNOFFERED_METHODS)


def network_methods(
    path: str, table: Mapping[str, Any], chain_id: int, extra_weights: ExtraWeights
) -> MethodSet:
    """The ``MethodSet`` of the network at ``path`` (``networks.bsc``); ConfigError if wrong."""
    methods = table.get("methods", default_methods(chain_id))
    if not isinstance(methods, list):
        raise ConfigError(f"{path}.methods: expected a list of method names")
    extra = table.get("extra_methods", [])
    weighted: dict[str, int] = {}
    as_table = isinstance(extra, Mapping)
    if isinstance(extra, Mapping):
        for method, units in extra.items():
            if isinstance(units, Mapping):  # { weight, group, timeout_s }: config/nodes.py
                if "weight" not in units:
                    continue
                units = units["weight"]
            if isinstance(units, bool) or not isinstance(units, int) or units < 0:
                where = f"{path}.extra_methods.{method}"
                raise ConfigError(f"{where}: expected a non-negative integer (compute units)")
            weighted[method] = units
        extra = list(extra)
    elif not isinstance(extra, list):
        raise ConfigError(f"{path}.extra_methods: expected a list of method names or a table")
    names: set[str] = set()
    patterns: set[str] = set()
    for key, items in (("methods", methods), ("extra_methods", extra)):
        for i, method in enumerate(items):
            where = (
                f"{path}.{key}.{method}"
                if as_table and key == "extra_methods"
                else (f"{path}.{key}[{i}]")
            )
            if not isinstance(method, str) or not _NAME.match(method):
                raise ConfigError(f"{where}: not a method name or a 'prefix*' pattern")
            why = refusal(method)
            if why is not None:
                raise ConfigError(f"{where}: {method!r} may never be offered publicly ({why})")
            if method.endswith("*"):
                patterns.add(method[:-1])
            else:
                names.add(method)
    for method, units in weighted.items():
        extra_weights.add(method, units, f"{path}.extra_methods.{method}")
    return MethodSet(names, patterns)
