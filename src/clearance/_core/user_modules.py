"""Importing the modules a team file names (``tools:`` entries, ``run: python:`` steps).

An installed module comes first. A module that is not installed is looked for in the current
folder, as ``python -m clearance`` would find it there, but only the module the team file
names: the current folder is never put on ``sys.path``, so an optional dependency Clearance
imports later (``ray``, ``mcp``, ``sentence_transformers``...) can never be taken from a file
of that folder, which may be a project under review.

A tool's module is imported under a deadline (`IMPORT_TIMEOUT_S`), in a daemon thread of its
own: its module-level code is the user's, and may block (a network call, a model loaded at
import). Whatever that thread raises (a ``sys.exit``, `KeyboardInterrupt` too) is handed
back as an `ImportFailed`, never taken for the person's Ctrl-C.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
from types import ModuleType

from clearance._core.errors import ConfigError

__all__ = ["IMPORT_TIMEOUT_S", "ImportFailed", "import_user_module", "split_import_path"]

IMPORT_TIMEOUT_S = 60.0
"""Seconds a tool module's import may take (see `import_user_module`'s ``timeout_s``)."""


class ImportFailed(Exception):
    """The import of a module, in a thread of its own, raised ``error`` (of any kind)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(type(error).__name__)
        self.error = error


def import_user_module(name: str, *, timeout_s: float | None = None) -> ModuleType:
    """The module ``name`` (``"package.module"``): installed, else from the current folder.

    Only the top-level package of ``name`` is looked up in the current folder; the modules it
    imports in turn resolve as usual (installed packages, ``PYTHONPATH``).

    Args:
        name: The module's dotted name.
        timeout_s: Seconds the import may take, run in a daemon thread of its own (past
            them the thread is abandoned, still running); ``None``: here, with no deadline.

    Raises:
        ValueError: ``name`` is not a dotted path of identifiers (``"a.b"``, not ``"a..b"``,
            ``".a"`` or ``"a/b"``); nothing is imported.
        ModuleNotFoundError: ``name`` is neither installed nor in the current folder.
        Exception: Whatever the module's own code raises while it is imported.
        ImportFailed: With ``timeout_s``: in place of whatever the import raised, of any
            kind (`ModuleNotFoundError` and `SystemExit` too).
        TimeoutError: The import did not finish within ``timeout_s``.
    """
    if not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"{name!r} is not a module name (dotted identifiers)")
    if timeout_s is None:
        return _imported(name)
    outcome: list[ModuleType | ImportFailed] = []
    done = threading.Event()

    def target() -> None:
        try:
            outcome.append(_imported(name))
        except BaseException as exc:  # any kind, handed back: never the caller's Ctrl-C
            outcome.append(ImportFailed(exc))
        finally:
            done.set()

    threading.Thread(target=target, name=f"clearance-import-{name}", daemon=True).start()
    if not done.wait(timeout_s):
        raise TimeoutError(
            f"its import did not finish within {timeout_s:g} s (its module-level code is "
            "still running)"
        )
    if isinstance(outcome[0], ImportFailed):
        raise outcome[0]
    return outcome[0]


def _imported(name: str) -> ModuleType:
    """`import_user_module` of a checked ``name``, here, with no deadline."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        top = name.partition(".")[0]
        if exc.name != top:  # the module exists; something it imports does not
            raise
    spec = importlib.machinery.PathFinder.find_spec(top, [os.getcwd()])
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(
            f"No module named {top!r} (installed or in the current folder)", name=top
        )
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(top, None)
        raise
    return importlib.import_module(name)


def split_import_path(path: str, *, field: str = "tools") -> tuple[str, str]:
    """``"package.module:function"`` as ``(module, qualified name)``, both dotted names.

    Raises:
        ConfigError: The path is not of that form (``field`` names the entry).
    """
    module_name, _, qualname = path.partition(":")
    if (
        not module_name
        or not qualname
        or not all(part.isidentifier() for part in (*module_name.split("."), *qualname.split(".")))
    ):
        raise ConfigError(
            f"{path!r} is not an import path of the form 'package.module:function'", field=field
        )
    return module_name, qualname
