"""Upper bounds on the built-in steps' results, in tokens, for pre-flight estimates."""

from __future__ import annotations

__all__ = ["step_result_tokens"]

_FIXED = {"review_brief": 550}
"""A brief: 650 characters of code, three functions, five findings, purpose and names."""
_PACKAGE_BASE, _PACKAGE_PER_MODULE = 450, 45
"""Package facts: ten ranked places, and one line per module."""


def step_result_tokens(name: str, inputs: int) -> int | None:
    """At most how many tokens the step ``name`` returns, given ``inputs`` admitted results.

    Returns:
        The bound, or ``None`` for a step whose result no model reads in a known form
        (the estimate then assumes its general bound).
    """
    if name in _FIXED:
        return _FIXED[name]
    if name == "package_facts":
        return _PACKAGE_BASE + _PACKAGE_PER_MODULE * inputs
    return None
