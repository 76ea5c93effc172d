"""Lone surrogates in store arguments: a one-line `ConfigError` on SQLite and PostgreSQL.

``"\\ud800"`` is text Python holds but no database driver encodes: ``sqlite3`` and psycopg
raise ``UnicodeEncodeError`` (not a `ClearanceError`), which reached the user as a traceback.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text

from clearance import ConfigError, ContextStore

LONE = "k\ud800"


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
    with ContextStore(url) as s:
        yield s


CALLS: list[tuple[str, Callable[[ContextStore], Any]]] = [
    ("key", lambda s: s.set("ns", LONE, "v", "a")),
    ("namespace", lambda s: s.set(LONE, "k", "v", "a")),
    ("value", lambda s: s.set("ns", "k", LONE, "a")),
    ("agent", lambda s: s.set("ns", "k", "v", LONE)),
    ("value", lambda s: s.set_with_extension("ns", "k", LONE, "a")),
    ("key", lambda s: s.get("ns", LONE)),
    ("key", lambda s: s.get_entry("ns", LONE)),
    ("key", lambda s: s.get_structured("ns", LONE)),
    ("namespace", lambda s: s.query(LONE)),
    ("prefix", lambda s: s.query_by_prefix("ns", LONE)),
    ("key", lambda s: s.touch("ns", LONE)),
    ("key", lambda s: s.delete("ns", LONE)),
    ("key", lambda s: s.view("a", {"ns": "read_write"}).set("ns", LONE, "v")),
]


@pytest.mark.parametrize(("field", "call"), CALLS)
def test_lone_surrogate_is_a_config_error(
    store: ContextStore, field: str, call: Callable[[ContextStore], Any]
) -> None:
    store.set("ns", "k", "kept", "a")
    with pytest.raises(ConfigError, match="not valid UTF-8") as info:
        call(store)
    assert info.value.field == field
    assert "\n" not in str(info.value)
    # The store still works, and nothing was lost.
    assert store.get("ns", "k") == "kept"
