"""The methods a network offers: exact names plus operator prefix patterns ("debug_trace*").

A ``frozenset`` of names, so every ``method in network.methods`` check of the
request path keeps its one hash lookup; a name that is not in the set is
then tried against the (few, usually zero) prefixes. Patterns are only ever
configured by the operator, and load.py refuses any that reaches a method
that is never offered. Whatever a pattern says, a name ending in
``FromFile`` or ``ToFile`` (any case) is never matched: such methods make
the node read or write a file the caller names (``debug_traceBlockFromFile``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

# Lowercased name endings of the methods that take a file path from the caller.
FILE_SUFFIXES: Final = ("fromfile", "tofile")


class MethodSet(frozenset[str]):
    """Offered method names (the set itself) and prefixes (``patterns``)."""

    patterns: tuple[str, ...]

    def __new__(cls, names: Iterable[str] = (), patterns: Iterable[str] = ()) -> MethodSet:
        self = super().__new__(cls, names)
        self.patterns = tuple(sorted(set(patterns)))
        return self

    def __contains__(self, method: object) -> bool:
        if frozenset.__contains__(self, method):
            return True
        if self.patterns and type(method) is str and method.startswith(self.patterns):
            return not method.lower().endswith(FILE_SUFFIXES)
        return False

    def __or__(self, other: Any) -> MethodSet:
        """Union keeps the patterns (the WebSocket path adds its own local methods)."""
        extra = other.patterns if isinstance(other, MethodSet) else ()
        return MethodSet(frozenset.__or__(self, frozenset(other)), (*self.patterns, *extra))

    def __reduce__(self) -> Any:
        return (MethodSet, (frozenset(self), self.patterns))

    def __repr__(self) -> str:
        return f"MethodSet({sorted(self)!r}, patterns={self.patterns!r})"
