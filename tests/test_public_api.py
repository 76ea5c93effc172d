"""The public API, namespace by namespace: `__all__` is exactly what each namespace offers.

As in httpx's export test: every attribute of a public namespace whose name does not start
with ``_`` and that is not a module is listed in its ``__all__``, and every listed name exists
there. Every exported name is documented where it is defined (a docstring, or for a constant
or type alias the string right after its assignment).
"""

from __future__ import annotations

import ast
import importlib
import sys
import types
from functools import cache
from pathlib import Path

import pytest

NAMESPACES = (
    "clearance",
    "clearance.analysis",
    "clearance.events",
    "clearance.memory",
    "clearance.models",
    "clearance.runs",
    "clearance.subagents",
    "clearance.testing",
    "clearance.tokens",
    "clearance.view",
)

SRC = Path(__file__).resolve().parents[1] / "src"


def public_names(module: types.ModuleType) -> list[str]:
    """Names a user sees on ``module``: not ``_``-prefixed and not a module.

    Read through ``dir`` and ``getattr``, so a name a namespace imports on first use (PEP 562)
    counts, and must import.
    """
    return sorted(
        name
        for name in dir(module)
        if not name.startswith("_") and not isinstance(getattr(module, name), types.ModuleType)
    )


@cache
def _tree(module: str) -> ast.Module:
    path = SRC.joinpath(*module.split("."))
    file = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    return ast.parse(file.read_text(encoding="utf-8"))


def docstring_of(module: str, name: str, hops: int = 5) -> str | None:
    """The docstring of ``name`` where ``module`` defines it, following re-exports.

    A re-export may sit in an ``if typing.TYPE_CHECKING:`` block, beside a lazy namespace's
    name table.
    """
    body: list[ast.stmt] = []
    for node in _tree(module).body:
        body.extend(node.body if isinstance(node, ast.If) else [node])
    for index, node in enumerate(body):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name == name:
                return ast.get_docstring(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                after = body[index + 1] if index + 1 < len(body) else None
                if (
                    isinstance(after, ast.Expr)
                    and isinstance(after.value, ast.Constant)
                    and isinstance(after.value.value, str)
                ):
                    return after.value.value
                return None
        elif isinstance(node, ast.ImportFrom) and node.module and hops:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return docstring_of(node.module, alias.name, hops - 1)
    return None


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_all_lists_exactly_the_public_names(namespace: str) -> None:
    module = importlib.import_module(namespace)
    assert module.__all__ == sorted(module.__all__)
    assert len(set(module.__all__)) == len(module.__all__)
    assert sorted(module.__all__) == public_names(module)


@pytest.mark.parametrize("namespace", NAMESPACES)
def test_every_exported_name_is_documented(namespace: str) -> None:
    module = importlib.import_module(namespace)
    assert (module.__doc__ or "").strip(), namespace
    undocumented = [n for n in module.__all__ if not (docstring_of(namespace, n) or "").strip()]
    assert undocumented == []


def test_a_name_is_exported_by_one_namespace_only() -> None:
    owners: dict[str, list[str]] = {}
    for namespace in NAMESPACES:
        for name in importlib.import_module(namespace).__all__:
            owners.setdefault(name, []).append(namespace)
    assert {n: o for n, o in owners.items() if len(o) > 1} == {}


def test_internal_run_state_is_not_exported() -> None:
    import clearance

    for name in ("TaskQueue", "TaskState", "SharedMemory", "StoreGrants"):
        assert not hasattr(clearance, name), name


def test_the_checks_catch_an_unlisted_name_and_an_undocumented_one() -> None:
    module = types.ModuleType("clearance_probe")
    module.__all__ = ["listed"]  # type: ignore[attr-defined]
    module.listed = 1  # type: ignore[attr-defined]
    module.unlisted = 2  # type: ignore[attr-defined]
    module.json = sys.modules["json"]  # type: ignore[attr-defined]
    assert public_names(module) == ["listed", "unlisted"]
    _tree.cache_clear()
    assert docstring_of("clearance.tokens", "TIKTOKEN_ENCODINGS")
    assert docstring_of("clearance._core.tokens", "_LOCK") is None


def test_library_never_imports_the_cli() -> None:
    import clearance.cli  # noqa: F401  (the CLI imports the library)

    for name, module in list(sys.modules.items()):
        if name.startswith("clearance.") and not name.startswith("clearance.cli"):
            source = getattr(module, "__file__", "") or ""
            if source.endswith(".py"):
                with open(source, encoding="utf-8") as fh:
                    assert "clearance.cli" not in fh.read(), name
