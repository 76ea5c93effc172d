"""Identifiers for runs and records."""

from __future__ import annotations

import os
import random
import time

__all__ = ["new_id"]

# The random suffixes come from a generator of this module's own, seeded from the operating
# system's entropy once per process, and again in a forked child, which would otherwise
# repeat its parent's ids (Windows has no fork, and no `register_at_fork`). Not `secrets`:
# `os.urandom` is a system call that lets go of the interpreter lock, so on a thread that
# makes ids for every model call another thread can take the lock each time. Not the
# `random` module's shared generator either: a program that calls `random.seed` would make
# every one of its processes draw the same ids.
_rng = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_rng.seed)


def new_id(prefix: str) -> str:
    """Return a new sortable id such as ``run_0193c1a2b3c4_9f2e4d1a``.

    The middle part is the creation time in milliseconds (hex), so ids sort by creation
    time; the suffix is 32 random bits (for uniqueness, not secrecy).

    Args:
        prefix: A short word naming the kind of record (``"run"``, ``"call"``).
    """
    return f"{prefix}_{int(time.time() * 1000):012x}_{_rng.getrandbits(32):08x}"
