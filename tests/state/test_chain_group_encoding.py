"""A group entry's text and digest do not depend on the records' container."""

from __future__ import annotations

import hashlib

import pytest

from clearance._core.prompt import ContextItem, sha256_text
from clearance._state.chain import group_entry, group_records

RECORDS = [("task", "t1", "a" * 64), ("call", "call_\u00e9", "b" * 64), ("event", "e1", "c" * 64)]


@pytest.mark.parametrize(
    "records",
    [RECORDS, tuple(RECORDS), [list(r) for r in RECORDS], iter(RECORDS)],
    ids=["list of tuples", "tuple of tuples", "list of lists", "iterator"],
)
def test_group_entry_is_the_same_for_any_sequence_of_records(records: object) -> None:
    subject, payload, text = group_entry(records)  # type: ignore[arg-type]
    assert text.startswith('[["task","t1","' + "a" * 64 + '"],["call","call_\u00e9","')
    assert text.endswith('["event","e1","' + "c" * 64 + '"]]')
    assert subject == "3"
    assert payload == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert group_records(subject, payload, text) == RECORDS


def test_group_entry_with_a_lone_surrogate_reads_back() -> None:
    records = [("message", "m\ud800", "d" * 64)]
    subject, payload, text = group_entry(tuple(records))
    assert group_entry([list(r) for r in records]) == (subject, payload, text)
    assert group_records(subject, payload, text) == records


def test_a_manifest_item_digest_is_its_contents_sha256_each_time() -> None:
    for content in ("alpha", "beta", "alpha", "\u00e9t\u00e9"):
        item = ContextItem(origin="goal", title="Goal", content=content, tokens=1)
        assert item.to_dict()["sha256"] == sha256_text(content)
