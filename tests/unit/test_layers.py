"""Imports point one way: each package's ``__init__`` docstring says what it may import.

The rule is read from the docstring's ``May import:`` sentence (names relative to
``gateway``, parenthesised remarks ignored, ``everything`` / ``nothing`` allowed), so
the docstring a newcomer reads is the rule this test enforces. Every import counts,
also those under ``TYPE_CHECKING`` and inside functions: a type-only cycle is a cycle.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "gateway"

# The top-level modules are not packages and so have no docstring rule of their own.
TOP_LEVEL = {
    "__main__": {"cli"},
    # create_app wires every part; it is below the server and the CLI that run it.
    "app": {"everything but", "cli", "server"},
    # every web.AppKey: the types of the app-wide objects, never the code that reads them
    "typedefs": {"config", "limits", "redis", "store", "upstream"},
    # the plug-in seam: what a plug-in is handed (config, each network's local
    # methods and pipeline), never a plug-in itself
    "plugin": {"config", "rpc", "tasks"},
    # a background task for a cleanup context's life: below everything
    "tasks": {"nothing"},
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _imports(path: Path, known: set[str]) -> set[str]:
    """Every gateway module ``path`` imports (``from gateway.<pkg> import y``: <pkg>.y)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "gateway")
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            if node.module.split(".")[0] != "gateway":
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in known else node.module)
    return found


def _graph() -> dict[str, set[str]]:
    mods = _modules()
    return {name: _imports(path, set(mods)) for name, path in mods.items()}


def _unit(module: str) -> str:
    """``gateway.store.apikeys`` -> ``store``; ``gateway.app`` -> ``app``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _allowed_by_docstring(package: Path) -> set[str]:
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    match = re.search(r"May import:\s*(.*?)\.(?:\s|$)", doc, re.S)
    assert match, f"{package.name}/__init__.py: docstring has no 'May import:' sentence"
    text = re.sub(r"\([^)]*\)", "", match.group(1))
    names = {n.strip() for n in re.split(r",|\band\b", text) if n.strip()}
    for name in names - {"everything", "nothing"}:
        assert re.fullmatch(r"[a-z_]+(\.[a-z_]+)?", name), f"{package.name}: odd entry {name!r}"
    return names


def _rules() -> dict[str, set[str]]:
    rules = dict(TOP_LEVEL)
    for init in sorted(ROOT.glob("*/__init__.py")):
        rules[init.parent.name] = _allowed_by_docstring(init.parent)
    return rules


def _permitted(target: str, allowed: set[str]) -> bool:
    rel = target.removeprefix("gateway.")
    hit = any(rel == a or rel.startswith(a + ".") for a in allowed)
    if "everything but" in allowed:
        return not hit
    return "everything" in allowed or hit


def test_every_package_states_its_imports() -> None:
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert packages <= set(_rules())
    assert {"config", "rpc", "limits", "upstream", "redis", "store", "dashboard"} <= packages
    assert {"ws", "filters"} <= packages  # the pipeline's plug-ins


def test_the_pipeline_does_not_know_its_plug_ins() -> None:
    """rpc -> filters would make the pipeline depend on one kind of local method."""
    rules = _rules()
    for plugin in ("filters", "ws"):
        assert not _permitted(f"gateway.{plugin}.service", rules["rpc"]), plugin
    assert _permitted("gateway.rpc.params", rules["filters"])
    assert not _permitted("gateway.ws.calls", rules["filters"])


def test_imports_point_the_declared_way() -> None:
    rules = _rules()
    wrong = []
    for module, targets in sorted(_graph().items()):
        unit = _unit(module)
        for target in sorted(targets):
            if _unit(target) == unit or target == "gateway":
                continue
            if not _permitted(target, rules[unit]):
                wrong.append(f"{module} -> {target}")
    assert not wrong, "imports the package docstrings do not allow:\n" + "\n".join(wrong)


def _package_arrows() -> dict[tuple[str, str], list[str]]:
    """(importing unit, imported unit) -> the module imports that make the arrow."""
    arrows: dict[tuple[str, str], list[str]] = {}
    for module, targets in _graph().items():
        for target in targets:
            pair = (_unit(module), _unit(target))
            if pair[0] != pair[1] and target != "gateway":
                arrows.setdefault(pair, []).append(f"{module} -> {target}")
    return arrows


def test_no_two_packages_import_each_other() -> None:
    """Arrows between packages point one way, even where no module-level cycle forms.

    ``rpc.pipeline -> store.insight`` and ``store.apikeys -> rpc.auth`` made no
    cycle of modules, yet a reader of either package had to know the other;
    each docstring allowed its side, so the rules above passed.
    """
    arrows = _package_arrows()
    both = sorted((a, b) for a, b in arrows if a < b and (b, a) in arrows)
    assert not both, "packages importing each other:\n" + "\n".join(
        f"{a} <-> {b}: " + "; ".join(sorted(arrows[(a, b)] + arrows[(b, a)])) for a, b in both
    )


def test_no_package_cycle_of_any_length() -> None:
    """Packages (and the top-level modules) form no loop, however long.

    Checking pairs missed ``ops -> typedefs -> upstream -> ops``: three
    arrows, each allowed on its own, that made every one of the three
    packages depend on the others.
    """
    graph: dict[str, set[str]] = {}
    for a, b in _package_arrows():
        graph.setdefault(a, set()).add(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    loops: list[list[str]] = []

    def strongconnect(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                strongconnect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                loops.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            strongconnect(node)
    arrows = _package_arrows()
    assert not loops, "package loops:\n" + "\n".join(
        " / ".join(loop)
        + ": "
        + "; ".join(
            arrow
            for (a, b), made in sorted(arrows.items())
            if {a, b} <= set(loop)
            for arrow in made
        )
        for loop in loops
    )


def test_no_import_cycles_not_even_type_only() -> None:
    graph = _graph()
    state: dict[str, int] = {}  # 1 on the path, 2 done
    cycles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            # A package's __init__ importing its own modules is how re-exports work.
            if node == nxt.rpartition(".")[0]:
                continue
            if state.get(nxt) == 1:
                cycles.append([*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt])
            elif nxt in graph and nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def _bench_graph() -> dict[str, set[str]]:
    """bench's modules and the bench modules each imports (any import, anywhere in it)."""
    bench = ROOT.parent / "bench"
    names = {
        ".".join(p.relative_to(bench.parent).with_suffix("").parts).removesuffix(".__init__"): p
        for p in sorted(bench.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module in names:
                subs = {f"{node.module}.{a.name}" for a in node.names}
                found |= (subs & set(names)) or {node.module}
            elif isinstance(node, ast.Import):
                found |= {a.name for a in node.names if a.name in names}
        graph[name] = found - {name}
    return graph


def test_bench_has_no_import_cycles() -> None:
    """The report asked a scenario for its plot, the scenario the report: a circle."""
    graph = _bench_graph()
    assert graph.get("bench.report")  # it sees bench's imports
    cycles = []
    for start in sorted(graph):
        seen, todo = set(), list(graph[start])
        while todo:
            mod = todo.pop()
            if mod == start:
                cycles.append(start)
                break
            if mod not in seen and not start.startswith(mod + "."):  # a package's own init
                seen.add(mod)
                todo.extend(graph.get(mod, ()))
    assert not cycles, f"bench modules that import themselves through others: {cycles}"


def _builds_key_names(path: Path) -> list[int]:
    """Lines of f-strings shaped like a Redis key: ``f"{...prefix}:..."``."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not isinstance(node, ast.JoinedStr):
            continue
        values = node.values
        for first, second in itertools.pairwise(values):
            expr = first.value if isinstance(first, ast.FormattedValue) else None
            name = (
                expr.id
                if isinstance(expr, ast.Name)
                else expr.attr
                if isinstance(expr, ast.Attribute)
                else ""
            )
            if (
                name.endswith("prefix")
                and isinstance(second, ast.Constant)
                and str(second.value).startswith(":")
            ):
                lines.append(node.lineno)
    return lines


# Not yet on keyspace: admission (being rewritten by the lead) and the shared cache
# (intel may import config only; its names are listed in keyspace's docstring).
_KEY_NAME_EXCEPTIONS = {"redis/keyspace.py", "limits/limiter.py", "intel/sharedcache.py"}


def test_redis_key_names_come_from_keyspace() -> None:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel not in _KEY_NAME_EXCEPTIONS and (lines := _builds_key_names(path)):
            found[rel] = lines
    assert not found, f"build key names with gateway.redis.keyspace, not by hand: {found}"


def test_the_checks_see_what_they_look_for() -> None:
    # The rules must be able to fail: the old dashboard import and a key f-string.
    assert not _permitted("gateway.rpc.handler", _rules()["dashboard"])
    assert _permitted("gateway.rpc.clientip", _rules()["dashboard"])
    assert not _permitted("gateway.cli.main", TOP_LEVEL["app"])
    assert _builds_key_names(ROOT / "redis" / "keyspace.py")
    assert ("rpc", "identity") in _package_arrows()  # the pair test sees real arrows
