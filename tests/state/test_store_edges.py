"""The context store at its edges, alike on SQLite and PostgreSQL.

What one database keeps and the other refuses is refused on both, before anything is
written, with a `ConfigError` naming the argument: a name longer than its column, a NUL
character, a value that is not text, a TTL that is not a number or rounds to an entry
written already expired. A search folds the case of every letter on both (SQLite's own
``lower`` folds ASCII only), and its namespace patterns match literally and case-sensitively.
Reads that extend expiry touch only what the grants let the agent read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from clearance import ConfigError, ContextStore
from clearance._state.store import MAX_AGENT_CHARS, MAX_KEY_CHARS, MAX_NAMESPACE_CHARS, entry


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[ContextStore]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'store.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
        engine = create_engine(url)
        with engine.begin() as conn:
            conn.execute(text("DROP TABLE IF EXISTS store_entries"))
            conn.execute(text("DROP TABLE IF EXISTS store_schema_version"))
        engine.dispose()
    with ContextStore(url, clock=Clock()) as s:
        yield s


def everything(store: ContextStore) -> list[tuple[str, str, str]]:
    return sorted((e.namespace, e.key, e.value) for e in store.search(["*"], "", 100))


# -- what is written ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "write"),
    [
        ("namespace", lambda s, n: s.set("x" * n, "k", "v", "a")),
        ("key", lambda s, n: s.set("ns", "x" * n, "v", "a")),
        ("agent", lambda s, n: s.set("ns", "k", "v", "x" * n)),
        ("key", lambda s, n: s.set_with_extension("ns", "x" * n, "v", "a")),
        ("key", lambda s, n: s.view("a", {"ns": "write"}).set("ns", "x" * n, "v")),
    ],
)
def test_a_name_at_its_limit_is_kept_and_a_longer_one_refused(
    store: ContextStore, field: str, write: Callable[[ContextStore, int], None]
) -> None:
    most = {"namespace": MAX_NAMESPACE_CHARS, "key": MAX_KEY_CHARS, "agent": MAX_AGENT_CHARS}
    most_chars = most[field]
    write(store, most_chars)
    kept = everything(store)
    assert len(kept) == 1
    with pytest.raises(ConfigError) as caught:
        write(store, most_chars + 1)
    assert caught.value.field == field
    assert f"{most_chars + 1:,} characters long, over the limit of {most_chars:,}" in str(
        caught.value
    )
    assert everything(store) == kept


NUL_CALLS: list[tuple[str, Callable[[ContextStore], Any]]] = [
    ("namespace", lambda s: s.set("n\x00s", "k", "v", "a")),
    ("key", lambda s: s.set("ns", "k\x00", "v", "a")),
    ("value", lambda s: s.set("ns", "k", "v\x00", "a")),
    ("agent", lambda s: s.set("ns", "k", "v", "a\x00")),
    ("value", lambda s: s.set_with_extension("ns", "k", "\x00", "a")),
    ("key", lambda s: s.get("ns", "k\x00")),
    ("key", lambda s: s.get_entry("ns", "k\x00")),
    ("key", lambda s: s.touch("ns", "k\x00")),
    ("key", lambda s: s.delete("ns", "k\x00")),
    ("namespace", lambda s: s.query("ns\x00")),
    ("prefix", lambda s: s.query_by_prefix("ns", "\x00")),
    ("text", lambda s: s.search(["ns"], "\x00")),
    ("pattern", lambda s: s.search(["n\x00*"], "v")),
    ("text", lambda s: s.search(["ns"], "\ud800")),
    ("key", lambda s: s.set("ns", 5, "v", "a")),
    ("namespace", lambda s: s.get(None, "k")),
]


@pytest.mark.parametrize(("field", "call"), NUL_CALLS)
def test_text_no_database_keeps_is_refused_on_both(
    store: ContextStore, field: str, call: Callable[[ContextStore], Any]
) -> None:
    store.set("ns", "k", "kept", "a")
    with pytest.raises(ConfigError) as caught:
        call(store)
    assert caught.value.field == field
    assert "\n" not in str(caught.value)
    assert everything(store) == [("ns", "k", "kept")]


@pytest.mark.parametrize("ttl", ["10", True, [1], 5e-7, 0, -1.0])
def test_a_ttl_that_is_not_a_usable_number_is_refused(store: ContextStore, ttl: Any) -> None:
    for write in (
        lambda: store.set("ns", "k", "v", "a", ttl),
        lambda: store.set_with_extension("ns", "k", "v", "a", ttl),
        lambda: store.touch("ns", "k", ttl),
        lambda: store.view("a", {"ns": "read"}, read_extends_ttl_s=ttl),
    ):
        with pytest.raises(ConfigError, match="must be a positive number of seconds from"):
            write()
    assert everything(store) == []


def test_the_shortest_ttl_is_one_microsecond_and_visible_until_then(store: ContextStore) -> None:
    clock: Clock = store._clock  # type: ignore[assignment]
    store.set("ns", "k", "v", "a", 1e-6)
    assert store.get("ns", "k") == "v"
    clock.now += timedelta(microseconds=1)
    assert store.get("ns", "k") is None


def test_a_value_past_the_limit_in_bytes_is_refused_before_it_is_sent(
    store: ContextStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past 2 GiB the driver failed with an OverflowError, not a store error.
    monkeypatch.setattr(entry, "MAX_VALUE_BYTES", 100)
    store.set("ns", "ascii", "x" * 100, "a")
    store.set("ns", "wide", "é" * 50, "a")  # 100 bytes of UTF-8
    for value in ("x" * 101, "é" * 51):
        with pytest.raises(ConfigError, match="bytes of UTF-8, over the limit of 100") as caught:
            store.set("ns", "big", value, "a")
        assert caught.value.field == "value"
    assert [k for _, k, _ in everything(store)] == ["ascii", "wide"]


def test_a_large_value_is_kept_whole(store: ContextStore) -> None:
    value = "é" * 3_000_000 + "\U0001f600"
    store.set("ns", "big", value, "a")
    assert store.get("ns", "big") == value


# -- search --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "needle", ["Éclair", "éclair", "ÉCLAIR", "über", "ÜBER", "straße", "ΣΟΦΊΑ", "σοφία"]
)
def test_search_folds_the_case_of_every_letter_on_both(store: ContextStore, needle: str) -> None:
    store.set("ns", "k", "Éclair ÜBER straße ΣΟΦΊΑ", "a")
    assert [e.key for e in store.search(["ns"], needle)] == ["k"]


@pytest.mark.parametrize(
    ("pattern", "found"),
    [
        ("a", ["a"]),
        ("a*", ["a", "a%c", "a/x", "a_b", "ab", "abc", "axb"]),
        ("a/*", ["a/x"]),
        ("a_*", ["a_b"]),  # "_" is not LIKE's any-character here
        ("a%*", ["a%c"]),  # nor "%" any-text
        ("A*", ["A"]),  # case-sensitive, though SQLite's LIKE is not
        ("*", ["A", "a", "a%c", "a/x", "a_b", "ab", "abc", "axb"]),
        ("ab", ["ab"]),
        ("b*", []),
    ],
)
def test_search_patterns_match_namespaces_literally(
    store: ContextStore, pattern: str, found: list[str]
) -> None:
    for namespace in ("a", "ab", "abc", "A", "a_b", "axb", "a%c", "a/x"):
        store.set(namespace, "k", "needle", "w")
    assert sorted(e.namespace for e in store.search([pattern], "needle", 100)) == found


# -- reads that extend expiry ------------------------------------------------------------------


def test_reads_that_extend_expiry_touch_only_granted_namespaces(store: ContextStore) -> None:
    clock: Clock = store._clock  # type: ignore[assignment]
    for namespace in ("a", "ab", "a/x", "b"):
        store.set(namespace, "k", "needle", "w", ttl_s=60)
    before = {e.namespace: e.expires_at for e in store.search(["*"], "needle", 100)}
    view = store.view("r", {"a": "read"}, read_extends_ttl_s=3600)
    clock.now += timedelta(seconds=1)
    assert view.get("a", "k") == "needle"
    assert [e.namespace for e in view.search("needle", 50)] == ["a"]
    assert [e.namespace for e in view.query_by_prefix("a", "")] == ["a"]
    after = {e.namespace: e.expires_at for e in store.search(["*"], "needle", 100)}
    assert after["a"] == clock.now + timedelta(seconds=3600)
    assert {n: after[n] for n in ("ab", "a/x", "b")} == {n: before[n] for n in ("ab", "a/x", "b")}
