"""A module's public names: its ``__all__`` when it declares one, with re-exports.

Module-level statements are read wherever they sit at module level: in the body, and in
the bodies of ``if``, ``try`` and ``with`` blocks (``try: from x import y`` / ``except:
def y``). A name imported from elsewhere and exported is a re-export, with its source.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from typing import Any

from clearance._core.vocabulary import NameKind

__all__ = ["declared_all", "public_names"]


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """Statements at module level, descending into ``if``/``try``/``with`` blocks, in order.

    Without recursion: an ``elif`` is an ``if`` in its parent's ``orelse``, and a chain of
    thousands of them (which parses) nests as deep.
    """
    pending: list[Iterator[ast.stmt]] = [iter(body)]
    while pending:
        stmt = next(pending[-1], None)
        if stmt is None:
            pending.pop()
            continue
        yield stmt
        blocks: list[list[ast.stmt]] = []
        if isinstance(stmt, ast.If):
            blocks = [stmt.body, stmt.orelse]
        elif isinstance(stmt, ast.Try | ast.TryStar):
            blocks = [stmt.body, stmt.orelse, stmt.finalbody, *(h.body for h in stmt.handlers)]
        elif isinstance(stmt, ast.With | ast.AsyncWith):
            blocks = [stmt.body]
        if blocks:
            pending.append(itertools.chain.from_iterable(blocks))


def _strings(node: ast.expr) -> list[str] | None:
    """The strings of a list/tuple literal (or a sum of them); ``None`` if not literal.

    Walked without recursion: a sum of thousands of literals parses, and is read.
    """
    found: list[str] = []
    parts = [node]
    while parts:  # the sum's terms, left to right
        part = parts.pop()
        if isinstance(part, ast.BinOp) and isinstance(part.op, ast.Add):
            parts += [part.right, part.left]
        elif isinstance(part, ast.List | ast.Tuple):
            values = [e.value for e in part.elts if isinstance(e, ast.Constant)]
            found += [v for v in values if isinstance(v, str)]
        else:
            return None
    return found


def declared_all(tree: ast.Module) -> list[str] | None:
    """The names of the module's ``__all__`` (``=``, ``: list = ``, ``+=``, ``.extend``).

    Returns:
        The names in order, duplicates dropped; ``None`` when the module declares none.
    """
    names: list[str] | None = None
    for stmt in _module_level(tree.body):
        value: ast.expr | None = None
        extend = False
        if (
            isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "__all__" for t in stmt.targets)
        ) or (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == "__all__"
        ):
            value = stmt.value
        elif (
            isinstance(stmt, ast.AugAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id == "__all__"
        ):
            value, extend = stmt.value, True
        elif (
            isinstance(stmt, ast.Expr)
            and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Attribute)
            and isinstance(stmt.value.func.value, ast.Name)
            and stmt.value.func.value.id == "__all__"
            and stmt.value.func.attr == "extend"
            and len(stmt.value.args) == 1
        ):
            value, extend = stmt.value.args[0], True
        if value is None:
            continue
        strings = _strings(value)
        if strings is None:
            continue
        if extend and names is not None:
            names.extend(strings)  # in place: a copy per statement is quadratic
        else:
            names = strings
    return None if names is None else list(dict.fromkeys(names))


def _bindings(tree: ast.Module, *, is_package: bool) -> dict[str, dict[str, Any]]:
    """Every name bound at module level: its kind, line and, for imports, its source."""
    bound: dict[str, dict[str, Any]] = {}
    for stmt in _module_level(tree.body):
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            end = stmt.end_lineno or stmt.lineno
            kind = NameKind.CLASS if isinstance(stmt, ast.ClassDef) else NameKind.FUNCTION
            bound.setdefault(
                stmt.name,
                {"kind": kind, "line": stmt.lineno, "lines": end - stmt.lineno + 1},
            )
        elif isinstance(stmt, ast.Assign | ast.AnnAssign):
            targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
            for target in targets:
                for node in ast.walk(target):
                    if isinstance(node, ast.Name) and node.id != "__all__":
                        bound.setdefault(node.id, {"kind": NameKind.CONSTANT, "line": stmt.lineno})
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            source = "." * getattr(stmt, "level", 0) + (getattr(stmt, "module", None) or "")
            for alias in stmt.names:
                if alias.name == "*":
                    continue
                name = alias.asname or alias.name.split(".")[0]
                explicit = alias.asname is not None and alias.asname == alias.name.split(".")[-1]
                relative = isinstance(stmt, ast.ImportFrom) and stmt.level > 0
                bound.setdefault(
                    name,
                    {
                        "kind": NameKind.IMPORT,
                        "line": stmt.lineno,
                        "from": source or alias.name,
                        # ``import x as x`` / ``from m import x as x`` (PEP 484), or a
                        # package's relative import, is an export without ``__all__``.
                        "exported": explicit or (is_package and relative),
                    },
                )
    return bound


def public_names(
    tree: ast.Module, *, is_package: bool = False
) -> tuple[list[dict[str, Any]], bool]:
    """The module's public names.

    With ``__all__``: exactly its names, in its order, each with the kind of its binding
    (``class``, ``function``, ``constant``, ``re-export`` with ``from``, or ``unbound`` when
    the module never binds it). Without: every name bound at module level that does not
    start with ``_`` and is not a plain import, plus explicit re-exports.

    Returns:
        ``(names, declared)``: each name ``{"name", "kind", "line", ...}``; ``declared`` is
        true when the names come from ``__all__``.
    """
    bound = _bindings(tree, is_package=is_package)
    declared = declared_all(tree)
    names: list[dict[str, Any]] = []
    if declared is not None:
        for name in declared:
            info = bound.get(name)
            if info is None:
                names.append({"name": name, "kind": NameKind.UNBOUND})
            else:
                names.append(_entry(name, info))
        return names, True
    for name, info in sorted(bound.items(), key=lambda kv: int(kv[1]["line"])):
        if name.startswith("_"):
            continue
        if info["kind"] == NameKind.IMPORT and not info["exported"]:
            continue
        names.append(_entry(name, info))
    return names, False


def _entry(name: str, info: dict[str, Any]) -> dict[str, Any]:
    if info["kind"] == NameKind.IMPORT:
        return {
            "name": name,
            "kind": NameKind.RE_EXPORT,
            "line": info["line"],
            "from": info["from"],
        }
    return {"name": name, **info}
