"""Lazy public namespaces (PEP 562): a name is imported from its defining module on first use.

A namespace lists each public name with the module that defines it, so ``import clearance``
(or ``from clearance.runs import SCHEMA_ID``) loads only the modules behind the names a
caller touches, and the command line's ``--help`` does not load the ledger or SQLAlchemy.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of a namespace whose names import on first use.

    Args:
        namespace: The namespace's module name (its ``__name__``).
        exports: Each public name mapped to the dotted name of the module that defines it.

    Returns:
        ``(__getattr__, __dir__)``: the first imports a listed name, caches it in the
        namespace and returns it, raising `AttributeError` for a name not listed; the second
        lists the namespace's attributes with the listed names not yet imported.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {namespace!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[namespace], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[namespace])) | set(exports))

    return __getattr__, __dir__
