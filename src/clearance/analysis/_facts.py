"""Facts about one Python module from the standard library's `ast`: names, sizes, branching.

Nothing here runs the module or imports it: the source is parsed, never executed.
"""

from __future__ import annotations

import ast
import threading
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MAX_EXCERPT_CHARS",
    "FunctionFacts",
    "branches",
    "module_structure",
    "module_slug",
]

MAX_EXCERPT_CHARS = 1800
"""Most characters of source a module's facts quote (one function, or its first lines)."""
MAX_PUBLIC = 40
"""Most public names listed per module."""
MAX_FUNCTIONS = 6
"""Most functions listed as the most branching of a module."""

_PARSE_LOCK = threading.Lock()

_DECISIONS = (
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.IfExp,
    ast.ExceptHandler,
    ast.comprehension,
    ast.Assert,
    ast.match_case,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class FunctionFacts:
    """One function or method.

    Attributes:
        name: ``function`` or ``Class.method``.
        line: First line (1-based).
        end_line: Last line.
        branches: Cyclomatic complexity (1 + decision points), nested functions excluded.
    """

    name: str
    line: int
    end_line: int
    branches: int

    @property
    def lines(self) -> int:
        """Lines the definition spans."""
        return self.end_line - self.line + 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {
            "name": self.name,
            "line": self.line,
            "lines": self.lines,
            "branches": self.branches,
        }


def module_slug(path: str) -> str:
    """The dotted name of a module relative to its package root.

    ``"decoder.py"`` is ``"decoder"``, ``"sub/__init__.py"`` is ``"sub"``, ``"__init__.py"``
    is ``""`` (the package itself).
    """
    stem = path.removesuffix(".py").replace("/", ".")
    if stem == "__init__":
        return ""
    return stem.removesuffix(".__init__")


def branches(node: ast.AST) -> int:
    """Cyclomatic complexity of a function: 1 + its decision points (not nested defs')."""
    count = 1
    stack = list(ast.iter_child_nodes(node))
    while stack:
        child = stack.pop()
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        if isinstance(child, _DECISIONS):
            count += 1
        elif isinstance(child, ast.BoolOp):
            count += len(child.values) - 1
        stack.extend(ast.iter_child_nodes(child))
    return count


def _functions(tree: ast.Module) -> list[FunctionFacts]:
    found: list[FunctionFacts] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append(
                    FunctionFacts(
                        name=name,
                        line=child.lineno,
                        end_line=child.end_lineno or child.lineno,
                        branches=branches(child),
                    )
                )
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")

    visit(tree, "")
    return found


def _public(tree: ast.Module) -> list[dict[str, Any]]:
    declared: list[str] | None = None
    names: list[dict[str, Any]] = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            with_value = node.value
            if isinstance(with_value, ast.List | ast.Tuple):
                declared = [
                    e.value
                    for e in with_value.elts
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)
                ]
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            end = node.end_lineno or node.lineno
            names.append(
                {
                    "name": node.name,
                    "kind": kind,
                    "line": node.lineno,
                    "lines": end - node.lineno + 1,
                }
            )
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id != "__all__":
                    names.append({"name": target.id, "kind": "constant", "line": node.lineno})
    if declared is not None:
        keep = set(declared)
        return [n for n in names if n["name"] in keep]
    return [n for n in names if not n["name"].startswith("_")]


def _imports(tree: ast.Module, package: str, slug: str, *, is_package: bool) -> list[str]:
    """Modules of the same package this module imports, as slugs (see `module_slug`)."""
    found: list[str] = []
    here = slug.split(".") if slug else []
    parent = here if is_package else here[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            module = node.module.split(".") if node.module else []
            if node.level:
                up = node.level - 1
                if up > len(parent):
                    continue  # above the package root: not one of its modules
                base = parent[: len(parent) - up]
                if module:
                    found.append(".".join([*base, *module]))
                else:
                    found.extend(".".join([*base, a.name]) for a in node.names)
            elif package and module and module[0] == package:
                if len(module) == 1:  # ``from pkg import x``: x may be a module of pkg
                    found.extend(a.name for a in node.names)
                else:
                    found.append(".".join(module[1:]))
        elif isinstance(node, ast.Import) and package:
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == package:
                    found.append(".".join(parts[1:]))
    return sorted(dict.fromkeys(found))


def module_structure(path: str, source: str, *, package: str = "") -> dict[str, Any]:
    """Structure of one module from its source: docstring, sizes, names, imports, branching.

    Args:
        path: The module's path relative to the package root (``"decoder.py"``).
        source: Its text.
        package: The package's import name, to recognise absolute imports of its own
            modules (``""``: only relative imports count).

    Returns:
        A JSON-ready mapping: ``module``, ``slug``, ``lines``, ``bytes``, ``purpose`` (the
        docstring's first line), ``public`` (names with kind, line and size), ``imports``
        (slugs of the package's modules it imports), ``functions`` (count), ``most_branching``
        (the functions of highest complexity) and ``excerpt`` (the source of the most
        branching function, at most `MAX_EXCERPT_CHARS`, with its line range); or, when
        the source does not parse, ``parse_error`` instead of the names.
    """
    slug = module_slug(path)
    lines = source.count("\n") + (0 if source.endswith("\n") or not source else 1)
    facts: dict[str, Any] = {
        "module": path,
        "slug": slug,
        "lines": lines,
        "bytes": len(source.encode("utf-8")),
    }
    try:
        # One parse at a time: CPython 3.11's AST constructor keeps its recursion depth in
        # per-interpreter state, and two threads parsing at once can fail with SystemError
        # ("AST constructor recursion depth mismatch"); steps run in worker threads.
        with _PARSE_LOCK:
            tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        facts["parse_error"] = f"{type(exc).__name__}: {getattr(exc, 'msg', exc)}"
        return facts
    doc = ast.get_docstring(tree) or ""
    facts["purpose"] = (doc.strip().splitlines() or [""])[0][:200]
    public = _public(tree)
    facts["public_count"] = len(public)
    facts["public"] = public[:MAX_PUBLIC]
    is_package = path == "__init__.py" or path.endswith("/__init__.py")
    imports = _imports(tree, package, slug, is_package=is_package)
    facts["imports"] = [i for i in imports if i != slug]
    functions = _functions(tree)
    facts["functions"] = len(functions)
    ranked = sorted(functions, key=lambda f: (-f.branches, -f.lines, f.line))
    facts["most_branching"] = [f.to_dict() for f in ranked[:MAX_FUNCTIONS]]
    if ranked:
        facts["excerpt"] = _excerpt(source, ranked[0])
    return facts


def _excerpt(source: str, function: FunctionFacts) -> dict[str, Any]:
    """The function's source, cut at a line boundary within `MAX_EXCERPT_CHARS`.

    The line range and ``complete`` say how much of it is quoted.
    """
    all_lines = source.splitlines()
    body = all_lines[function.line - 1 : function.end_line]
    kept: list[str] = []
    size = 0
    for line in body:
        if size + len(line) + 1 > MAX_EXCERPT_CHARS:
            break
        kept.append(line)
        size += len(line) + 1
    last = function.line + len(kept) - 1
    return {
        "symbol": function.name,
        "first_line": function.line,
        "last_line": last,
        "complete": last >= function.end_line,
        "text": "\n".join(kept),
    }
