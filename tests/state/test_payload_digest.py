"""`payload_sha256` equals the digest its docstring describes, on generated records.

A `JSONText` value (canonical JSON, as a run's graph is kept) digests as the value it holds:
what ``verify`` computes from the column read back."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from clearance._core.prompt import canonical_json
from clearance._state.chain import ENTRY_FIELDS, OPTIONAL_FIELDS, payload_sha256
from clearance._state.db import JSONText


def reference_payload_sha256(kind: str, row: dict[str, Any]) -> str:
    """The digest spelled out: each field normalized, then canonical JSON, then SHA-256."""

    def normal(value: Any) -> Any:
        if isinstance(value, JSONText):  # canonical JSON already: the value it holds
            return json.loads(value)
        if isinstance(value, datetime):
            aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value
            return aware.astimezone(UTC).isoformat(timespec="microseconds")
        if isinstance(value, bool):
            return int(value)
        return value

    fields = {name: normal(row.get(name)) for name in ENTRY_FIELDS[kind]}
    for name in OPTIONAL_FIELDS.get(kind, ()):
        if row.get(name) is not None:
            fields[name] = normal(row[name])
    return hashlib.sha256(canonical_json(fields).encode("utf-8", "surrogatepass")).hexdigest()


class _Time(datetime):
    """A subclass of `datetime`, digested like one."""


_zones = st.sampled_from(
    [None, UTC, timezone(timedelta(0)), timezone(timedelta(hours=5, minutes=30))]
)
_times = st.builds(
    lambda moment, zone, sub: (
        (_Time if sub else datetime)
        .fromtimestamp(moment, UTC)
        .astimezone(zone if zone is not None else UTC)
        .replace(tzinfo=zone)
    ),
    st.integers(0, 4_000_000_000).map(lambda s: s / 7),
    _zones,
    st.booleans(),
)
_text = st.text(alphabet=st.characters(codec=None, exclude_categories=()), max_size=12)
_plain = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | _text
_values = (
    _plain
    | _times
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(_plain, max_size=3)
    | st.dictionaries(_text, _plain, max_size=3)
    | (st.lists(_plain, max_size=3) | st.dictionaries(_text, _plain, max_size=3) | _plain).map(
        lambda v: JSONText(canonical_json(v))
    )
)


@st.composite
def _records(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    kind = draw(st.sampled_from(sorted(ENTRY_FIELDS)))
    names = ENTRY_FIELDS[kind] + OPTIONAL_FIELDS.get(kind, ()) + ("run_id", "messages")
    present = draw(st.lists(st.sampled_from(names), unique=True))
    return kind, {name: draw(_values) for name in present}


@settings(max_examples=400, deadline=None)
@given(_records())
def test_payload_digest_equals_the_reference(record: tuple[str, dict[str, Any]]) -> None:
    kind, row = record
    assert payload_sha256(kind, row) == reference_payload_sha256(kind, row)


def test_a_time_is_digested_as_utc_text_with_microseconds() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    row = {"event_id": "e", "kind": "k", "subject": "s", "data": {}, "created_at": at}
    naive = {**row, "created_at": at.replace(tzinfo=None)}
    shifted = {**row, "created_at": at.astimezone(timezone(timedelta(hours=-3)))}
    digest = payload_sha256("event", row)
    assert digest == payload_sha256("event", naive) == payload_sha256("event", shifted)
    text = (
        '{"created_at":"2026-01-02T03:04:05.000000+00:00","data":{},"event_id":"e",'
        '"kind":"k","subject":"s"}'
    )
    assert digest == hashlib.sha256(text.encode()).hexdigest()


def test_a_graph_kept_as_canonical_text_digests_as_the_graph_read_back() -> None:
    graph = [
        {"id": "a", "title": "Ünïcode", "depends_on": [], "output_schema": {"minimum": 0.5}},
        {"id": "b", "title": "B", "depends_on": ["a"], "output_schema": None},
    ]
    row = {"run_id": "r", "team": "t", "status": "running", "config": {"n": 2**70}}
    kept = {**row, "graph": JSONText(canonical_json(graph))}
    read_back = {**row, "graph": json.loads(kept["graph"])}
    # 2**70 is beyond orjson: the standard library's path parses the spliced text back.
    assert payload_sha256("run", kept) == payload_sha256("run", read_back)
    plain = {**row, "config": {}}
    assert payload_sha256("run", {**plain, "graph": JSONText(canonical_json(graph))}) == (
        payload_sha256("run", {**plain, "graph": graph})
    )


def test_a_spliced_graph_is_digested_by_orjson_without_parsing_it_back(monkeypatch) -> None:
    """The standard library's path (which parses the text back) is only for what orjson
    refuses: a graph of plain JSON never takes it."""
    import clearance._state.chain as chain

    def refuse(value: Any) -> str:
        raise AssertionError("the slow path was taken")

    graph = [{"id": "a", "depends_on": []}]
    expected = payload_sha256("run", {"run_id": "r", "graph": graph})
    monkeypatch.setattr(chain, "canonical_json", refuse)
    assert payload_sha256("run", {"run_id": "r", "graph": JSONText(canonical_json(graph))}) == (
        expected
    )
