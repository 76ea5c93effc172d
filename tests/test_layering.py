"""Imports point down the layers, and no module imports itself back, even from a function body.

Every module under ``src/clearance`` is parsed with `ast`; every ``import`` statement counts,
wherever it is (module level, function body, ``try`` block), so an upward dependency cannot hide
in a lazy import. The command line imports only public names: no ``clearance._*`` module (nor
a private module of a public namespace, such as ``clearance.models._base``). The layers, top to
bottom, and what sits in each:

    cli            clearance.cli, clearance.__main__
    public         clearance (the package), clearance.events, clearance.subagents,
                   clearance.memory, clearance.runs, clearance.view, clearance.testing (test
                   doubles for users' tests;
                   nothing in the library imports them)
    orchestration  clearance._orchestration, clearance._view (the run page: reads recorded runs)
    reports        clearance._reports (a finished run's report: code review, generic, SARIF)
    agents         clearance._agents, clearance.analysis (built-in steps a team file runs in
                   place of a model call)
    context        clearance._context
    state          clearance._state
    models         clearance.models
    core           clearance._core, clearance.tokens

A module may import its own layer and the layers below it. Imports under
``if TYPE_CHECKING:`` count for direction (a type is a dependency too) but not for cycles,
since they never run.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("core", ("clearance._core", "clearance.tokens")),
    ("models", ("clearance.models",)),
    ("state", ("clearance._state",)),
    ("context", ("clearance._context",)),
    ("agents", ("clearance._agents", "clearance.analysis")),
    ("orchestration", ("clearance._orchestration", "clearance._view")),
    ("reports", ("clearance._reports",)),
    (
        "public",
        (
            "clearance",
            "clearance.events",
            "clearance.subagents",
            "clearance.memory",
            "clearance.runs",
            "clearance.testing",
            "clearance.view",
        ),
    ),
    ("cli", ("clearance.cli", "clearance.__main__")),
)

# Known violations in modules being split on other branches, to be emptied once they land.
# Each entry: (importing module, imported module). Keep it empty otherwise: a new upward
# import or cycle is fixed, not listed.
ALLOWED_UPWARD: frozenset[tuple[str, str]] = frozenset()
ALLOWED_CYCLES: frozenset[tuple[str, str]] = frozenset()


@dataclass(frozen=True)
class Edge:
    """One import statement: ``source`` imports ``target`` at ``line``."""

    source: str
    target: str
    line: int
    type_only: bool


def module_names(root: Path) -> dict[str, Path]:
    """Dotted module name → file, for every ``.py`` file under ``root``."""
    names: dict[str, Path] = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join(parts)] = path
    return names


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.stmt, bool]]:
    """Every import statement in ``tree``, at any depth, with whether it is type-only."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from _imports(ast.Module(body=[child], type_ignores=[]), type_only)
        else:
            yield from _imports(node, type_only)


def _targets(name: str, is_package: bool, node: ast.stmt, known: dict[str, Path]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    assert isinstance(node, ast.ImportFrom)
    if node.level:
        base = name.split(".") if is_package else name.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    targets = [module]
    targets += [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in known]
    return targets


def import_edges(root: Path, package: str = "clearance") -> list[Edge]:
    """Every import of a ``package`` module by a ``package`` module under ``root``."""
    known = module_names(root)
    edges: list[Edge] = []
    for name, path in known.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node, type_only in _imports(tree):
            for target in _targets(name, path.name == "__init__.py", node, known):
                while target and target not in known and "." in target:
                    target = target.rsplit(".", 1)[0]
                if target in known and target.split(".")[0] == package and target != name:
                    edges.append(Edge(name, target, node.lineno, type_only))
    return edges


def layer_of(module: str) -> int:
    """The rank of ``module``'s layer (0 = core); the longest matching prefix decides."""
    best, rank = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            exact = prefix == "clearance"
            matches = module == prefix or (not exact and module.startswith(prefix + "."))
            if matches and len(prefix) > best:
                best, rank = len(prefix), index
    if rank < 0:
        raise AssertionError(f"{module} is in no layer: add it to LAYERS")
    return rank


def upward_imports(edges: list[Edge]) -> list[Edge]:
    """The edges that import a higher layer."""
    return [e for e in edges if layer_of(e.target) > layer_of(e.source)]


def cycles(edges: list[Edge]) -> list[list[str]]:
    """Each import cycle once, as ``[a, b, ..., a]``, over the edges that run."""
    graph: dict[str, set[str]] = {}
    for e in edges:
        if not e.type_only:
            graph.setdefault(e.source, set()).add(e.target)
    found: dict[frozenset[str], list[str]] = {}
    for source in sorted(graph):
        for target in sorted(graph[source]):
            path = _path(graph, target, source)
            if path is not None:
                found.setdefault(frozenset(path), [source, *path])
    return list(found.values())


def _path(graph: dict[str, set[str]], start: str, goal: str) -> list[str] | None:
    parents: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        if node == goal:
            path = [node]
            while (parent := parents[path[-1]]) is not None:
                path.append(parent)
            return path[::-1]
        for nxt in sorted(graph.get(node, ())):
            if nxt not in parents:
                parents[nxt] = node
                frontier.append(nxt)
    return None


def test_every_module_is_in_a_layer() -> None:
    for name in module_names(SRC):
        layer_of(name)


def test_imports_point_down_the_layers() -> None:
    bad = [
        f"{e.source}:{e.line} imports {e.target} "
        f"({LAYERS[layer_of(e.source)][0]} -> {LAYERS[layer_of(e.target)][0]})"
        for e in upward_imports(import_edges(SRC))
        if (e.source, e.target) not in ALLOWED_UPWARD
    ]
    assert bad == []


def test_no_import_cycles() -> None:
    bad = [
        " -> ".join(cycle)
        for cycle in cycles(import_edges(SRC))
        if not any(pair in ALLOWED_CYCLES for pair in itertools.pairwise(cycle))
    ]
    assert bad == []


def test_allow_lists_hold_only_live_violations() -> None:
    edges = import_edges(SRC)
    upward = {(e.source, e.target) for e in upward_imports(edges)}
    assert upward >= ALLOWED_UPWARD, ALLOWED_UPWARD - upward
    in_cycles = {pair for c in cycles(edges) for pair in itertools.pairwise(c)}
    assert in_cycles >= ALLOWED_CYCLES, ALLOWED_CYCLES - in_cycles


@pytest.fixture
def fake_package(tmp_path: Path) -> Path:
    pkg = tmp_path / "clearance"
    for sub in ("_core", "_state", "cli"):
        (pkg / sub).mkdir(parents=True)
        (pkg / sub / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "_core" / "low.py").write_text(
        "def later():\n    from clearance._state import high\n    return high\n"
    )
    (pkg / "_state" / "high.py").write_text("from clearance._core import low\n")
    (pkg / "_state" / "typed.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from clearance.cli import app\n"
    )
    (pkg / "cli" / "app.py").write_text("from clearance._state.typed import x\n")
    return tmp_path


def test_checker_finds_an_upward_import_and_a_cycle_hidden_in_a_function(
    fake_package: Path,
) -> None:
    edges = import_edges(fake_package)
    upward = {(e.source, e.target, e.type_only) for e in upward_imports(edges)}
    assert ("clearance._core.low", "clearance._state.high", False) in upward
    assert ("clearance._state.typed", "clearance.cli.app", True) in upward
    found = cycles(edges)
    assert len(found) == 1
    assert set(found[0]) == {"clearance._core.low", "clearance._state.high"}
    assert found[0][0] == found[0][-1]


def private_imports(edges: list[Edge], sources: tuple[str, ...] = ("clearance.cli",)) -> list[Edge]:
    """The edges from ``sources`` modules into a private module outside ``sources``.

    A module is private when a part of its dotted name after ``clearance`` starts with ``_``
    (``clearance._core.spec``, ``clearance.models._base``).
    """

    def inside(module: str) -> bool:
        return any(module == s or module.startswith(s + ".") for s in sources)

    return [
        e
        for e in edges
        if inside(e.source)
        and not inside(e.target)
        and any(part.startswith("_") for part in e.target.split(".")[1:])
    ]


def test_the_command_line_imports_only_public_names() -> None:
    bad = [f"{e.source}:{e.line} imports {e.target}" for e in private_imports(import_edges(SRC))]
    assert bad == []


def test_checker_finds_a_private_import_of_the_command_line(fake_package: Path) -> None:
    found = {(e.source, e.target) for e in private_imports(import_edges(fake_package))}
    assert found == {("clearance.cli.app", "clearance._state.typed")}


MAX_MODULE_LINES = 500
"""No module holds more than this many lines: one concept per module."""


def test_no_module_is_over_the_line_limit() -> None:
    sizes = {
        str(path.relative_to(SRC)): len(path.read_text(encoding="utf-8").splitlines())
        for path in SRC.rglob("*.py")
    }
    assert len(sizes) > 100  # the walk found the package
    too_long = {name: n for name, n in sizes.items() if n > MAX_MODULE_LINES}
    assert too_long == {}
