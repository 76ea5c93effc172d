"""Facts about one Python module from the standard library's `ast`: names, sizes, branching.

Nothing here runs the module or imports it: the source is parsed, never executed.
"""

from __future__ import annotations

import ast
import re
import threading
from dataclasses import dataclass
from typing import Any

from clearance.analysis._complexity import COMPLEXITY_NAME, complexities
from clearance.analysis._imports import capped_imports, child_statements, package_imports
from clearance.analysis._names import public_names

__all__ = [
    "MAX_EXCERPT_CHARS",
    "MAX_NAME_CHARS",
    "FunctionFacts",
    "functions",
    "module_structure",
    "module_slug",
    "source_lines",
]

MAX_EXCERPT_CHARS = 1800
"""Most characters of source a module's facts quote (one function, or its first lines)."""
MAX_PUBLIC = 40
"""Most public names listed per module."""
MAX_FUNCTIONS = 6
"""Most functions listed as the most complex of a module."""
MAX_NAME_CHARS = 200
"""Most characters of a name the facts quote (Python sets no limit on a name's length, and
the facts' size is capped); a longer name ends with ``…`` and its entry has ``name_chars``."""

_PARSE_LOCK = threading.Lock()


@dataclass(frozen=True, kw_only=True, slots=True)
class FunctionFacts:
    """One function or method, wherever it is defined.

    Attributes:
        name: ``function``, ``Class.method`` or ``outer.inner`` (a def nested in another).
        line: First line (1-based).
        end_line: Last line.
        complexity: McCabe complexity as ruff's C901 counts it (see `complexity`).
    """

    name: str
    line: int
    end_line: int
    complexity: int

    @property
    def lines(self) -> int:
        """Lines the definition spans."""
        return self.end_line - self.line + 1

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form, the name within `MAX_NAME_CHARS` (see `named`)."""
        return named(
            {"name": self.name, "line": self.line, "lines": self.lines,
             "complexity": self.complexity}
        )  # fmt: skip


def clipped(name: str) -> str:
    """``name``, or its first `MAX_NAME_CHARS` characters ending with ``…``."""
    return name if len(name) <= MAX_NAME_CHARS else name[: MAX_NAME_CHARS - 1] + "\u2026"


def named(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` with its ``name`` (and ``from``) `clipped`; ``name_chars`` when cut."""
    name = str(entry["name"])
    out = {**entry, "name": clipped(name)}
    if "from" in out:
        out["from"] = clipped(str(out["from"]))
    if len(name) > MAX_NAME_CHARS:
        out["name_chars"] = len(name)
    return out


def module_slug(path: str) -> str:
    """The dotted name of a module relative to its package root.

    ``"decoder.py"`` is ``"decoder"``, ``"sub/__init__.py"`` is ``"sub"``, ``"__init__.py"``
    is ``""`` (the package itself).
    """
    stem = path.removesuffix(".py").replace("/", ".")
    if stem == "__init__":
        return ""
    return stem.removesuffix(".__init__")


def functions(tree: ast.Module) -> list[FunctionFacts]:
    """Every ``def`` of a module wherever it is nested (``if``, ``try``, class, function).

    Returns:
        One entry per definition, in source order, named by its enclosing classes and
        functions (``Class.method``, ``outer.inner``).
    """
    found: list[FunctionFacts] = []
    measured = complexities(tree)
    pending: list[tuple[ast.AST, str]] = [(tree, "")]
    while pending:  # no recursion: a chain of ``elif``s nests thousands deep (see `complexities`)
        node, prefix = pending.pop()
        for child in child_statements(node):  # a def is a statement: no expression walked
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                found.append(
                    FunctionFacts(
                        name=name,
                        line=child.lineno,
                        end_line=child.end_lineno or child.lineno,
                        complexity=measured[child],
                    )
                )
                pending.append((child, f"{name}."))
            elif isinstance(child, ast.ClassDef):
                pending.append((child, f"{prefix}{child.name}."))
            else:
                pending.append((child, prefix))
    found.sort(key=lambda f: f.line)
    return found


def module_structure(path: str, source: str, *, package: str = "") -> dict[str, Any]:
    """Structure of one module from its source: docstring, sizes, names, imports, complexity.

    Args:
        path: The module's path relative to the package root (``"decoder.py"``).
        source: Its text.
        package: The package's import name, to recognise absolute imports of its own
            modules (``""``: only relative imports count).

    Returns:
        A JSON-ready mapping: ``module``, ``slug``, ``lines`` (as Python counts them,
        `source_lines`),
        ``bytes``, ``purpose`` (the docstring's first sentence), ``public`` (at most
        `MAX_PUBLIC` names with kind and line; ``__all__`` when declared, with re-exports),
        ``public_count``, ``all_declared``, ``imports`` (slugs of the package's modules it
        imports at run time), ``type_imports`` (those imported only under
        ``TYPE_CHECKING``), ``imported_names`` (names imported from each, by slug), each
        capped with its count (``imports_count``...: see `capped_imports`),
        ``functions`` (every ``def`` wherever nested), ``complexity_measure``,
        ``most_complex`` (at most `MAX_FUNCTIONS`, highest complexity first) and
        ``excerpt`` (the source of the most complex function, at most
        `MAX_EXCERPT_CHARS`, with its line range); or, when the source does not parse,
        ``parse_error`` instead of the names. A name over `MAX_NAME_CHARS` is cut (`named`).
    """
    slug = module_slug(path)
    facts: dict[str, Any] = {
        "module": path,
        "slug": slug,
        "lines": len(source_lines(source)),
        "bytes": len(source.encode("utf-8")),
    }
    source = source.removeprefix("\ufeff")  # a byte order mark: Python reads past it too
    try:
        # One parse at a time: CPython 3.11's AST constructor keeps its recursion depth in
        # per-interpreter state, and two threads parsing at once can fail with SystemError
        # ("AST constructor recursion depth mismatch"); steps run in worker threads.
        with _PARSE_LOCK:
            tree = ast.parse(source, filename=path)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        facts["parse_error"] = _parse_error(exc)
        return facts
    doc = ast.get_docstring(tree) or ""
    facts["purpose"] = _first_sentence(doc)
    is_package = path == "__init__.py" or path.endswith("/__init__.py")
    public, declared = public_names(tree, is_package=is_package)
    facts["public_count"] = len(public)
    facts["all_declared"] = declared
    facts["public"] = [named(p) for p in public[:MAX_PUBLIC]]
    facts.update(capped_imports(package_imports(tree, package, slug, is_package=is_package)))
    defs = functions(tree)
    facts["functions"] = len(defs)
    facts["complexity_measure"] = COMPLEXITY_NAME
    ranked = sorted(defs, key=lambda f: (-f.complexity, -f.lines, f.line))
    facts["most_complex"] = [f.to_dict() for f in ranked[:MAX_FUNCTIONS]]
    if ranked:
        facts["excerpt"] = _excerpt(source, ranked[0], _docstring_lines(tree, ranked[0].line))
    return facts


def _parse_error(exc: BaseException) -> str:
    """One line saying why the source does not parse (``Type: message``).

    CPython's parser raises a `MemoryError` with no message when its stack overflows
    (``x = ----...1``, ``not not ... x``): the line then says so.
    """
    message = " ".join(str(getattr(exc, "msg", exc)).split())
    if isinstance(exc, MemoryError) and not message:
        message = "too deeply nested for Python's parser"
    return f"{type(exc).__name__}: {message}"[:300]


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def source_lines(source: str) -> list[str]:
    r"""The lines of ``source`` as Python numbers them: broken at ``\r\n``, ``\r`` and ``\n``.

    Not `str.splitlines`, which also breaks at a form feed, ``\x1c``-``\x1e``, NEL and the
    Unicode line and paragraph separators: in a comment or a string they would shift every
    later line away from the numbers `ast` and ruff give.
    """
    lines = _LINE_BREAK.split(source)
    if lines and not lines[-1]:
        lines.pop()  # the break that ends the last line starts no line of its own
    return lines


_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
"""Control characters, DEL, C1 and the bidirectional overrides: shown escaped in a purpose."""


def _first_sentence(doc: str, limit: int = 200) -> str:
    r"""The first sentence of a docstring's first paragraph, on one line (``limit`` chars).

    A control character in it (a terminal escape, a bidirectional override) is shown as its
    escape (``\x1b``): a module's docstring reaches reports and the terminal.
    """
    paragraph = " ".join(doc.strip().split("\n\n", 1)[0].split())
    paragraph = _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), paragraph)
    match = re.search(r"(?<=[.!?])\s", paragraph)
    sentence = paragraph[: match.start()] if match else paragraph
    return sentence if len(sentence) <= limit else sentence[: limit - 1] + "…"


def _docstring_lines(tree: ast.Module, line: int) -> tuple[int, int] | None:
    """The line range of the docstring of the function defined at ``line``, if any."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.lineno == line:
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                return first.lineno, first.end_lineno or first.lineno
            return None
    return None


def _excerpt(
    source: str, function: FunctionFacts, docstring: tuple[int, int] | None = None
) -> dict[str, Any]:
    """The function's source, its docstring left out, cut at a line within `MAX_EXCERPT_CHARS`.

    The line range and ``complete`` say how much of it is quoted; ``docstring_lines`` how
    many docstring lines were left out (the code is what a review reads).
    """
    all_lines = source_lines(source)
    skip = range(docstring[0], docstring[1] + 1) if docstring else range(0)
    kept: list[str] = []
    size = 0
    last = function.line - 1
    for number in range(function.line, function.end_line + 1):
        if number in skip:
            continue
        line = all_lines[number - 1] if number <= len(all_lines) else ""
        if size + len(line) + 1 > MAX_EXCERPT_CHARS:
            break
        kept.append(line)
        size += len(line) + 1
        last = number
    return {
        "symbol": clipped(function.name),
        "first_line": function.line,
        "last_line": last,
        "complete": last >= function.end_line,
        "docstring_lines": len(skip),
        "text": "\n".join(kept),
    }
