"""Identifiers for runs and records."""

from __future__ import annotations

import secrets
import time

__all__ = ["new_id"]


def new_id(prefix: str) -> str:
    """Return a new sortable id such as ``run_0193c1a2b3c4_9f2e4d1a``.

    The middle part is the creation time in milliseconds (hex), so ids sort by creation
    time; the suffix is 32 random bits.

    Args:
        prefix: A short word naming the kind of record (``"run"``, ``"call"``).
    """
    return f"{prefix}_{int(time.time() * 1000):012x}_{secrets.token_hex(4)}"
