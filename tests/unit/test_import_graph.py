"""`app.py` only composes: no module of the package imports it back (the shared state lives in
voice_gateway/gateway.py); the command line is the one importer: it starts the app. No import
cycles among the modules of voice_gateway, transcripts, agents and memory, and those packages
import one way: voice_gateway -> transcripts -> agents -> memory."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "voice_gateway"
ALLOWED = {"cli.py"}


def importers_of_app(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        rel = str(path.relative_to(package))
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            if "voice_gateway.app" in names and rel not in ALLOWED:
                found.append(f"{rel}:{node.lineno}")
    return found


def test_nothing_imports_app_back() -> None:
    assert importers_of_app() == []


def test_the_check_sees_an_import(tmp_path: Path) -> None:
    (tmp_path / "routes").mkdir()
    (tmp_path / "routes" / "x.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from voice_gateway.app import Gateway\n"
    )
    (tmp_path / "y.py").write_text("import voice_gateway.app\n")
    (tmp_path / "cli.py").write_text("from voice_gateway.app import create_app\n")
    assert importers_of_app(tmp_path) == ["routes/x.py:3", "y.py:1"]


# No import cycles among the modules of voice_gateway, agents, memory and transcripts. Every
# import counts: at module level, inside a function, and under `if TYPE_CHECKING:`. A function-
# level import runs later but still ties the two modules together (neither can be understood,
# tested or moved without the other), and a TYPE_CHECKING import is a dependency of the types
# both sides promise; an import cycle is a design cycle either way. `from a import b` counts as
# an import of module `a.b` when that is a module, else of `a`.
PACKAGES = ("voice_gateway", "agents", "memory", "transcripts")


def modules(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of the packages it imports (anywhere in it)."""
    mods = modules(root, packages)

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the package, up level - 1
                    up = package[: len(package) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                names = [base] + [f"{base}.{a.name}" for a in node.names]
            for name in names:
                target = known(name)
                if target is not None and target != mod:
                    graph[mod].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.add(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.add(frozenset(component))
    return found


def test_no_import_cycles() -> None:
    found = sorted(sorted(c) for c in cycles(import_graph(PACKAGE.parent)))
    assert found == [], f"import cycles: {found}"


def test_the_cycle_check_counts_every_import(tmp_path: Path) -> None:
    pkg = tmp_path / "voice_gateway"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from voice_gateway.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f() -> None:\n    from ..c import C\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import voice_gateway.a\n"
    )
    (pkg / "d.py").write_text("import voice_gateway.c\n")  # into the cycle, not part of it
    graph = import_graph(tmp_path, ("voice_gateway",))
    assert graph["voice_gateway.sub.b"] == {"voice_gateway.c"}
    assert cycles(graph) == {
        frozenset({"voice_gateway.a", "voice_gateway.sub.b", "voice_gateway.c"})
    }
    (pkg / "c.py").write_text("C = 1\n")
    assert cycles(import_graph(tmp_path, ("voice_gateway",))) == set()


# The packages' one direction: each imports only those after it.
LAYERS = ("voice_gateway", "transcripts", "agents", "memory")


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    rank = {package: i for i, package in enumerate(LAYERS)}
    return sorted(
        f"{mod} -> {target}"
        for mod, targets in graph.items()
        for target in targets
        if rank[target.partition(".")[0]] < rank[mod.partition(".")[0]]
    )


def test_packages_import_one_way() -> None:
    assert upward_imports(import_graph(PACKAGE.parent)) == []


def test_the_layer_check_sees_an_upward_import(tmp_path: Path) -> None:
    for package in ("agents", "memory"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "agents" / "loop.py").write_text("from memory import store\n")
    (tmp_path / "memory" / "store.py").write_text("def f() -> None:\n    import agents.loop\n")
    graph = import_graph(tmp_path, ("agents", "memory"))
    assert upward_imports(graph) == ["memory.store -> agents.loop"]
