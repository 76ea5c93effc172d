"""A namespace and key too large together for PostgreSQL's index are refused on both databases.

PostgreSQL's primary key on ``(namespace, key)`` holds at most 2,704 bytes a row; a name of
characters that do not compress past it fails there, deep in the write, while SQLite keeps
it. Both refuse it before anything is written (`MAX_NAME_BYTES`), and keep one at the limit.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from typer.testing import CliRunner

from clearance import ConfigError, ContextStore
from clearance._state.store import MAX_KEY_CHARS, MAX_NAME_BYTES, MAX_NAMESPACE_CHARS
from clearance.cli import app


def astral(count: int, seed: int) -> str:
    """``count`` characters of four bytes of UTF-8 each, in an order that does not compress."""
    rnd = random.Random(seed)
    return "".join(chr(rnd.randint(0x10000, 0x10FFF)) for _ in range(count))


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


def test_names_within_each_column_but_too_large_together_are_refused_on_both(
    store: ContextStore,
) -> None:
    namespace, key = astral(MAX_NAMESPACE_CHARS, 1), astral(MAX_KEY_CHARS, 2)
    for write in (
        lambda: store.set(namespace, key, "v", "a"),
        lambda: store.set_with_extension(namespace, key, "v", "a"),
        lambda: store.view("a", {"*": "write"}).set(namespace, key, "v"),
        lambda: store.set("ns", astral(MAX_NAME_BYTES // 4, 3), "v", "a"),  # 2 bytes over
    ):
        with pytest.raises(ConfigError) as caught:
            write()
        assert caught.value.field == "key"
        assert f"over the limit of {MAX_NAME_BYTES:,} for the two together" in str(caught.value)
    assert store.search(["*"], "", 10) == []


def test_a_namespace_and_key_at_the_limit_together_are_kept_on_both(store: ContextStore) -> None:
    namespace, key = astral(100, 4), astral(MAX_NAME_BYTES // 4 - 100, 5)
    assert len(namespace.encode()) + len(key.encode()) == MAX_NAME_BYTES
    store.set(namespace, key, "kept", "a")
    assert store.get(namespace, key) == "kept"


def test_the_command_line_refuses_it_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    done = CliRunner().invoke(
        app,
        ["store", "set", astral(200, 6), astral(600, 7), "v", "--db", f"sqlite:///{db}"],
    )
    assert done.exit_code == 2, done.output
    (line,) = done.output.strip().splitlines()
    assert f"over the limit of {MAX_NAME_BYTES:,} for the two together" in line
    assert not db.exists()
