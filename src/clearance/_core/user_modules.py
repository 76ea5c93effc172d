"""Importing the modules a team file names (``tools:`` entries, ``run: python:`` steps).

An installed module comes first. A module that is not installed is looked for in the current
folder, as ``python -m clearance`` would find it there, but only the module the team file
names: the current folder is never put on ``sys.path``, so an optional dependency Clearance
imports later (``ray``, ``mcp``, ``sentence_transformers``...) can never be taken from a file
of that folder, which may be a project under review.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import os
import sys
from types import ModuleType

from clearance._core.errors import ConfigError

__all__ = ["import_user_module", "split_import_path"]


def import_user_module(name: str) -> ModuleType:
    """The module ``name`` (``"package.module"``): installed, else from the current folder.

    Only the top-level package of ``name`` is looked up in the current folder; the modules it
    imports in turn resolve as usual (installed packages, ``PYTHONPATH``).

    Raises:
        ValueError: ``name`` is not a dotted path of identifiers (``"a.b"``, not ``"a..b"``,
            ``".a"`` or ``"a/b"``); nothing is imported.
        ModuleNotFoundError: ``name`` is neither installed nor in the current folder.
        Exception: Whatever the module's own code raises while it is imported.
    """
    if not all(part.isidentifier() for part in name.split(".")):
        raise ValueError(f"{name!r} is not a module name (dotted identifiers)")
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
