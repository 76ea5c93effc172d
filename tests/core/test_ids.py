"""Record ids: sortable by time, unique across threads and processes."""

from __future__ import annotations

import os
import random
import re
import sys
import threading
import time

import pytest

from clearance._core import ids
from clearance._core.ids import new_id


def test_an_id_is_prefix_time_and_32_random_bits() -> None:
    before = int(time.time() * 1000)
    rid = new_id("call")
    after = int(time.time() * 1000)
    match = re.fullmatch(r"call_([0-9a-f]{12})_([0-9a-f]{8})", rid)
    assert match is not None, rid
    assert before <= int(match.group(1), 16) <= after


def test_ids_sort_by_creation_time() -> None:
    first = new_id("run")
    time.sleep(0.002)
    assert new_id("run") > first


def test_threads_share_one_generator_and_each_draw_is_used_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Seeded, the generator's outputs are known: the suffixes made on 4 threads together
    # must be exactly its first 20,000 outputs, none repeated and none lost.
    monkeypatch.setattr(ids, "_rng", random.Random(7))
    made: list[list[str]] = [[] for _ in range(4)]

    def make(out: list[str]) -> None:
        out.extend(ids.new_id("x")[-8:] for _ in range(5_000))

    threads = [threading.Thread(target=make, args=(out,)) for out in made]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = random.Random(7)
    assert sorted(s for out in made for s in out) == sorted(
        f"{expected.getrandbits(32):08x}" for _ in range(20_000)
    )


def test_seeding_the_random_module_does_not_repeat_ids() -> None:
    # A program that seeds `random` (as tests and ML scripts do) must not make the same ids
    # as another process seeded alike.
    state = random.getstate()
    try:
        random.seed(42)
        one = [new_id("run")[-8:] for _ in range(3)]
        random.seed(42)
        two = [new_id("run")[-8:] for _ in range(3)]
    finally:
        random.setstate(state)
    assert one != two


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_does_not_repeat_its_parents_ids() -> None:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next suffixes, to the parent
        try:
            os.write(write, ",".join(new_id("x")[-8:] for _ in range(5)).encode())
        finally:
            os._exit(0)
    os.close(write)
    parent = [new_id("x")[-8:] for _ in range(5)]
    with os.fdopen(read) as pipe:
        child = pipe.read().split(",")
    os.waitpid(pid, 0)
    assert len(child) == 5
    assert not set(child) & set(parent), (sys.platform, child, parent)
