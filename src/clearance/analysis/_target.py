"""The oldest Python a package supports, from its installed metadata (``Requires-Python``).

Ruff is told this version (``--target-version``), so a rule that only holds on newer
Pythons (``zip(strict=)``, say) is not reported for a package that still supports older
ones.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
import sys
from dataclasses import dataclass

__all__ = ["PythonTarget", "python_target", "target_from_specifier"]

_OLDEST, _NEWEST = 7, 13
"""The ``3.x`` range of ruff's ``--target-version`` values used here."""
_LOWER = re.compile(r"(>=|>|~=|==)\s*3\.0*(\d{1,3})(\d*)")
"""A lower bound on ``3.x``; more than three digits of ``x`` is past any Python (clamped)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PythonTarget:
    """A package's oldest supported Python.

    Attributes:
        version: Ruff's name for it (``"py38"``).
        source: Where it was read, for the report (``"Requires-Python >=3.8 of httpx
            0.27.0"``).
    """

    version: str
    source: str


def target_from_specifier(specifier: str) -> str | None:
    """Ruff's ``--target-version`` for a ``Requires-Python`` specifier.

    ``">=3.8"`` is ``"py38"``; ``">=3.8, !=3.9.0"`` is ``"py38"``; a specifier with no
    lower bound on 3.x is ``None``. Versions outside ruff's range are clamped to it.
    """
    minors = [
        (int(m.group(2)) if not m.group(3) else _NEWEST) + (1 if m.group(1) == ">" else 0)
        for m in _LOWER.finditer(specifier)
    ]
    if not minors:
        return None
    minor = min(max(max(minors), _OLDEST), _NEWEST)
    return f"py3{minor}"


@functools.cache
def python_target(package: str) -> PythonTarget | None:
    """The oldest Python the installed package ``package`` (an import name) supports.

    The standard library's own packages (``json``) target the running interpreter.

    Returns:
        The target, or ``None`` when the package is not installed or declares no lower
        bound (ruff then uses its default).
    """
    if not package:
        return None
    if package in sys.stdlib_module_names:
        minor = min(max(sys.version_info.minor, _OLDEST), _NEWEST)
        return PythonTarget(
            version=f"py3{minor}", source=f"the standard library of Python 3.{minor}"
        )
    for dist in importlib.metadata.packages_distributions().get(package, []):
        try:
            meta = importlib.metadata.metadata(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
        specifier = (meta.get_all("Requires-Python") or [""])[0]
        version = target_from_specifier(specifier)
        if version is not None:
            release = (meta.get_all("Version") or [""])[0]
            return PythonTarget(
                version=version,
                source=f"Requires-Python {specifier} of {dist} {release}".strip(),
            )
    return None
