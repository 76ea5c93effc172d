"""Which modules of its own package a module imports, at run time or for type checking only.

An import under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) never runs: it is a
type dependency, shown apart, and does not count towards a module's fan-in.

The lists are capped (`capped_imports`): one statement may import 40,000 names, or a name
of megabytes. Past a cap, the imports most likely to be of modules are kept: those whose
statement names the module (``from .mod import x``), then the names of the statements that
import the fewest.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_IMPORTED_NAMES",
    "MAX_IMPORTS",
    "MAX_LISTED_CHARS",
    "PackageImports",
    "capped_imports",
    "child_statements",
    "package_imports",
]

MAX_IMPORTS = 500
"""Most modules listed in each of a module's ``imports`` and ``type_imports``."""
MAX_IMPORTED_NAMES = 500
"""Most names listed in a module's ``imported_names``, over all the modules they come from."""
MAX_LISTED_CHARS = 20_000
"""Most characters of one of those lists together (its modules' names too); a longer name is
left out, not cut: a cut name would be a module or a name the package does not have."""


@dataclass(kw_only=True, slots=True)
class PackageImports:
    """A module's imports of its own package's modules, as slugs (``"sub.mod"``).

    Attributes:
        runtime: Modules imported by code that runs (module level or a function body).
        type_only: Modules imported only under ``if TYPE_CHECKING:``.
        names: The names imported from each module (``from .m import a, b``), by slug.
        candidates: Per slug of ``runtime`` and ``type_only``, how many names the fewest
            of the statements importing it offer as modules: 1 when a statement names the
            module (``from .m import x``, ``import pkg.m``), ``n`` for each name of ``from
            . import a, b, ...`` (a name of the package, a module or not).
    """

    runtime: list[str] = field(default_factory=list)
    type_only: list[str] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)
    candidates: dict[str, int] = field(default_factory=dict)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def child_statements(node: ast.AST) -> Iterator[ast.stmt]:
    """The statements of ``node``'s blocks: its body, ``else``, ``finally``, handlers, cases.

    Statements (an import, a ``def``, a ``class``) sit only in blocks, so a walk of
    statements never descends into an expression: ``x = 1 + 1 + ...`` of thousands of
    terms, which parses, costs it nothing. Blocks nest at most 100 deep (the parser's limit
    on indentation) but an ``elif`` is an ``if`` in its parent's ``orelse``: a chain of
    thousands nests as deep, so callers walk with a list of pending nodes, not recursion.
    """
    for name in ("body", "orelse", "finalbody", "handlers", "cases"):
        block = getattr(node, name, None)
        if not isinstance(block, list):
            continue  # a lambda's or a conditional expression's body: an expression
        for child in block:
            if isinstance(child, ast.stmt):
                yield child
            else:  # an ``except`` handler or a ``case``: its statements
                yield from child.body


def _walk(node: ast.AST) -> Iterator[tuple[ast.stmt, bool]]:
    """Every statement with whether it sits in a ``TYPE_CHECKING`` block's body.

    Without recursion: blocks nest at most 100 deep, but an ``elif`` nests in its ``if``'s
    ``orelse`` with no indentation, and a chain of thousands of them parses.
    """
    pending: list[tuple[ast.AST, bool]] = [(node, False)]
    while pending:
        parent, type_only = pending.pop()
        for child in child_statements(parent):
            yield child, type_only
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.body:
                    yield stmt, True
                    pending.append((stmt, True))
                for stmt in child.orelse:
                    yield stmt, type_only
                    pending.append((stmt, type_only))
                continue
            pending.append((child, type_only))


def package_imports(
    tree: ast.Module, package: str, slug: str, *, is_package: bool
) -> PackageImports:
    """The modules of the same package that a module imports (see `PackageImports`).

    Args:
        tree: The parsed module.
        package: The package's import name, to recognise absolute imports of its own
            modules (``""``: only relative imports count).
        slug: The module's slug (``module_slug`` of its path).
        is_package: Whether the module is a package's ``__init__.py``.
    """
    runtime: list[str] = []
    typed: list[str] = []
    names: dict[str, list[str]] = {}
    candidates: dict[str, int] = {}
    here = slug.split(".") if slug else []
    parent = here if is_package else here[:-1]
    for node, type_only in _walk(tree):
        found: list[str] = []
        offered = 1  # how many names the statement offers as modules
        if isinstance(node, ast.ImportFrom):
            module = node.module.split(".") if node.module else []
            if node.level:
                up = node.level - 1
                if up > len(parent):
                    continue  # above the package root: not one of its modules
                base = parent[: len(parent) - up]
                target = ".".join([*base, *module])
                if module:
                    found.append(target)
                else:
                    found.extend(".".join([*base, a.name]) for a in node.names)
                    offered = len(node.names)
            elif package and module and module[0] == package:
                target = ".".join(module[1:])
                if len(module) == 1:  # ``from pkg import x``: x may be a module of pkg
                    found.extend(a.name for a in node.names)
                    offered = len(node.names)
                else:
                    found.append(target)
            else:
                continue
            names.setdefault(target, []).extend(a.name for a in node.names)
        elif isinstance(node, ast.Import) and package:
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == package:
                    found.append(".".join(parts[1:]))
        (typed if type_only else runtime).extend(found)
        for target in found:
            candidates[target] = min(candidates.get(target, offered), offered)
    run = sorted({t for t in runtime if t != slug})
    typing_only = sorted({t for t in typed if t != slug} - set(run))
    return PackageImports(
        runtime=run,
        type_only=typing_only,
        names={k: sorted(set(v)) for k, v in sorted(names.items()) if k != slug},
        candidates={t: candidates[t] for t in run + typing_only},
    )


def _first(ranked: list[str], limit: int, chars: int = MAX_LISTED_CHARS) -> list[str]:
    """The first of ``ranked`` within ``limit`` names and ``chars`` characters together."""
    kept: list[str] = []
    for name in ranked:
        if len(kept) == limit:
            break
        if len(name) <= chars:
            kept.append(name)
            chars -= len(name)
    return kept


def capped_imports(imports: PackageImports) -> dict[str, Any]:
    """The facts of ``imports``, each list capped, with how many there were.

    Returns:
        ``imports`` and ``type_imports`` (at most `MAX_IMPORTS` slugs each, sorted: those
        with the fewest ``candidates`` kept first), ``imported_names`` (at most
        `MAX_IMPORTED_NAMES` names over all its slugs, those of the slugs with the fewest
        names kept first), each within `MAX_LISTED_CHARS`; and ``imports_count``,
        ``type_imports_count`` and ``imported_names_count``: how many there were in all.
    """
    facts: dict[str, Any] = {}
    for key, slugs in (("imports", imports.runtime), ("type_imports", imports.type_only)):
        ranked = sorted(slugs, key=lambda s: (imports.candidates.get(s, 1), s))
        facts[key] = sorted(_first(ranked, MAX_IMPORTS))
        facts[f"{key}_count"] = len(slugs)
    names: dict[str, list[str]] = {}
    room, chars = MAX_IMPORTED_NAMES, MAX_LISTED_CHARS
    for target, listed in sorted(imports.names.items(), key=lambda kv: (len(kv[1]), kv[0])):
        if room == 0:
            break
        kept = _first(listed, room, chars - len(target)) if len(target) < chars else []
        if kept:
            names[target] = kept
            room -= len(kept)
            chars -= len(target) + sum(len(n) for n in kept)
    facts["imported_names"] = dict(sorted(names.items()))
    facts["imported_names_count"] = sum(len(v) for v in imports.names.values())
    return facts
