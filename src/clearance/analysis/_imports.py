"""Which modules of its own package a module imports, at run time or for type checking only.

An import under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``) never runs: it is a
type dependency, shown apart, and does not count towards a module's fan-in.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field

__all__ = ["PackageImports", "child_statements", "package_imports"]


@dataclass(kw_only=True, slots=True)
class PackageImports:
    """A module's imports of its own package's modules, as slugs (``"sub.mod"``).

    Attributes:
        runtime: Modules imported by code that runs (module level or a function body).
        type_only: Modules imported only under ``if TYPE_CHECKING:``.
        names: The names imported from each module (``from .m import a, b``), by slug.
    """

    runtime: list[str] = field(default_factory=list)
    type_only: list[str] = field(default_factory=list)
    names: dict[str, list[str]] = field(default_factory=dict)


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
    here = slug.split(".") if slug else []
    parent = here if is_package else here[:-1]
    for node, type_only in _walk(tree):
        found: list[str] = []
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
            elif package and module and module[0] == package:
                target = ".".join(module[1:])
                if len(module) == 1:  # ``from pkg import x``: x may be a module of pkg
                    found.extend(a.name for a in node.names)
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
    run = sorted({t for t in runtime if t != slug})
    return PackageImports(
        runtime=run,
        type_only=sorted({t for t in typed if t != slug} - set(run)),
        names={k: sorted(set(v)) for k, v in sorted(names.items()) if k != slug},
    )
