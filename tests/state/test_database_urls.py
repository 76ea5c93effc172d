"""Database URLs in their odd forms, and a PostgreSQL server that never answers.

Every form is either opened as what it names or refused in one line naming the URL: an
SQLite URI (``file:...?uri=true``) is held to the same rules as a path (a read-only open of
a missing file creates nothing), a query argument SQLite would silently ignore
(``mode=ro`` without ``uri=true``) is refused instead of being dropped, a path holding a
NUL or ending in ``/`` is refused, and an unsupported database is named as such. A
PostgreSQL server that accepts the connection and then says nothing fails within the
connect deadline instead of hanging.
"""

from __future__ import annotations

import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from clearance import ContextStore, RunLedger, StoreError
from clearance._state.db.opening import CONNECT_TIMEOUT_S
from clearance._state.memory_records import MemoryDatabase
from clearance.runs import sqlite_file_path


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///x.db", "x.db"),
        ("sqlite:////abs/x.db", "/abs/x.db"),
        ("sqlite://", None),
        ("sqlite:///", None),
        ("sqlite:///:memory:", None),
        ("sqlite:///file:x.db", "file:x.db"),  # without uri=true: a file of that name
        ("sqlite:///file:x.db?uri=true", "x.db"),
        ("sqlite:///file:///abs/x%20y.db?uri=true", "/abs/x y.db"),
        ("sqlite:///file://localhost/abs/x.db?uri=true", "/abs/x.db"),
        ("sqlite:///file::memory:?uri=true", None),
        ("sqlite:///file:x.db?mode=memory&uri=true", None),
        ("sqlite:///x.db?uri=true", "x.db"),  # not a file: URI, so a plain path
        ("postgresql://u@h/db", None),
        ("not a url", None),
    ],
)
def test_the_file_an_sqlite_url_names(url: str, expected: str | None) -> None:
    assert sqlite_file_path(url) == expected


@pytest.mark.parametrize(
    "url", ["sqlite:///file:x.db?uri=maybe", "sqlite:///file://elsewhere/x.db?uri=true"]
)
def test_an_sqlite_url_that_names_nothing_clearly_is_an_error(url: str) -> None:
    with pytest.raises(ValueError, match=r"uri must be true or false|no host but localhost"):
        sqlite_file_path(url)


OPENERS = {
    "ledger": (lambda url, **kw: RunLedger(url, **kw)),
    "store": (lambda url, **kw: ContextStore(url, **kw)),
    "memory": (lambda url, **kw: MemoryDatabase(url, **kw)),
}


@pytest.mark.parametrize("kind", sorted(OPENERS))
@pytest.mark.parametrize("how", [{"create": False}, {"read_only": True}])
def test_a_missing_file_named_by_an_sqlite_uri_is_refused_and_not_created(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str, how: dict[str, bool]
) -> None:
    monkeypatch.chdir(tmp_path)
    for url in ("sqlite:///file:new.db?uri=true", f"sqlite:///file://{tmp_path}/new.db?uri=true"):
        with pytest.raises(StoreError, match=r"^no .* at sqlite:///file.*the file does not exist$"):
            OPENERS[kind](url, **how)
    assert list(tmp_path.iterdir()) == []


def test_an_sqlite_uri_opens_the_file_it_names_read_only_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with ContextStore("sqlite:///file:s.db?uri=true") as store:
        store.set("ns", "k", "v", "a")
    assert (tmp_path / "s.db").is_file()
    with ContextStore("sqlite:///file:s.db?uri=true", read_only=True) as store:
        assert store.get("ns", "k") == "v"
    with ContextStore(f"sqlite:///{tmp_path / 's.db'}", create=False) as store:
        assert store.get("ns", "k") == "v"


@pytest.mark.parametrize("query", ["mode=ro", "cache=shared", "bogus=1"])
def test_an_sqlite_uri_argument_without_uri_true_is_refused_not_ignored(
    tmp_path: Path, query: str
) -> None:
    path = tmp_path / "s.db"
    with ContextStore(f"sqlite:///{path}") as store:
        store.set("ns", "k", "kept", "a")
    before = path.read_bytes()
    name = query.split("=")[0]
    with pytest.raises(StoreError) as caught:
        ContextStore(f"sqlite:///{path}?{query}").set("ns", "k", "overwritten", "a")
    message = str(caught.value)
    assert message.startswith(f"cannot open the store at sqlite:///{path}?{query}: ")
    assert f"no query argument '{name}' without uri=true" in message
    assert "\n" not in message
    assert path.read_bytes() == before


def test_a_driver_argument_is_still_accepted(tmp_path: Path) -> None:
    with ContextStore(f"sqlite:///{tmp_path / 's.db'}?timeout=20") as store:
        store.set("ns", "k", "v", "a")
        assert store.get("ns", "k") == "v"


@pytest.mark.parametrize(
    ("tail", "message"),
    [
        ("a%00b.db", "its path holds a NUL character"),
        ("sub/", "it is a folder, not a file"),
    ],
)
def test_a_path_no_file_can_have_is_one_line_and_creates_nothing(
    tmp_path: Path, tail: str, message: str
) -> None:
    url = f"sqlite:///{tmp_path}/{tail}"
    with pytest.raises(StoreError) as caught:
        ContextStore(url)
    assert str(caught.value) == f"cannot open the store at {url}: {message}"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("url", ["mysql://u@localhost/x", "oracle://u@localhost/x", "mssql://h/x"])
def test_an_unsupported_database_is_named_without_loading_a_driver(url: str) -> None:
    with pytest.raises(StoreError) as caught:
        ContextStore(url)
    assert str(caught.value).endswith("(use sqlite or postgresql)")
    assert "unsupported database" in str(caught.value)


# -- PostgreSQL: a deadline to connect ---------------------------------------------------------


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port whose server accepts connections and never sends a byte."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    server.settimeout(0.2)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1])
    finally:
        stop.set()
        thread.join(5)
        for conn in accepted:
            conn.close()
        server.close()


@pytest.mark.parametrize("kind", ["store", "ledger"])
def test_a_postgresql_server_that_never_answers_fails_within_the_deadline(
    silent_server: int, kind: str
) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql+psycopg://u@127.0.0.1:{silent_server}/db"
    started = time.monotonic()
    with pytest.raises(StoreError) as caught:
        OPENERS[kind](url)
    elapsed = time.monotonic() - started
    assert elapsed < CONNECT_TIMEOUT_S + 5, elapsed
    message = str(caught.value)
    assert url in message and "timeout" in message.lower() and "\n" not in message


def test_a_connect_timeout_in_the_url_is_used_instead(silent_server: int) -> None:
    pytest.importorskip("psycopg")
    url = f"postgresql+psycopg://u@127.0.0.1:{silent_server}/db?connect_timeout=2"
    started = time.monotonic()
    with pytest.raises(StoreError, match="timeout"):
        ContextStore(url)
    assert time.monotonic() - started < CONNECT_TIMEOUT_S


@pytest.mark.parametrize("value", ["0", "-5", "abc", "1.5", "601", "3&connect_timeout=4"])
def test_a_connect_timeout_that_is_no_deadline_is_refused(value: str) -> None:
    # libpq waits forever on 0 or less: the URL may not take the deadline away.
    url = f"postgresql+psycopg://u@127.0.0.1:1/db?connect_timeout={value}"
    with pytest.raises(StoreError) as caught:
        ContextStore(url)
    assert "connect_timeout must be whole seconds from 1 to 600" in str(caught.value)


def test_a_store_write_waits_for_another_sessions_lock_only_so_long(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS store_entries"))
        conn.execute(text("DROP TABLE IF EXISTS store_schema_version"))
    monkeypatch.setattr(ContextStore, "_LOCK_TIMEOUT_MS", 500)
    with ContextStore(postgres_url) as store:
        store.set("ns", "k", "before", "a")
        holder = engine.connect()
        try:
            holder.begin()
            holder.execute(text("UPDATE store_entries SET value = 'held' WHERE key = 'k'"))
            failures: list[BaseException] = []

            def write() -> None:
                try:
                    store.set("ns", "k", "after", "a")
                except BaseException as exc:
                    failures.append(exc)

            writer = threading.Thread(target=write)
            writer.start()
            writer.join(10)
            waited = writer.is_alive()
        finally:
            holder.rollback()  # lets a writer that waits with no deadline go on
            holder.close()
        writer.join()
        assert not waited, "the write waited for the lock with no deadline"
        assert len(failures) == 1 and isinstance(failures[0], StoreError)
        assert re.search("cannot write ns/k .*lock timeout", str(failures[0]))
        store.set("ns", "k", "after", "a")  # the lock is gone: the store works on
        assert store.get("ns", "k") == "after"
    engine.dispose()


def test_a_store_opened_read_only_on_postgresql_reads_and_never_writes(postgres_url: str) -> None:
    # Read-only was enforced on SQLite only: on PostgreSQL a read-only open could write.
    engine = create_engine(postgres_url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS store_entries"))
        conn.execute(text("DROP TABLE IF EXISTS store_schema_version"))
    engine.dispose()
    with ContextStore(postgres_url) as store:
        store.set("ns", "k", "v", "a")
    with ContextStore(postgres_url, read_only=True) as store:
        assert store.get("ns", "k") == "v"
        assert [e.key for e in store.query("ns")] == ["k"]
        with pytest.raises(StoreError, match="read-only transaction"):
            store.set("ns", "k", "changed", "a")
        with pytest.raises(StoreError, match="read-only transaction"):
            store.cleanup()
    with ContextStore(postgres_url) as store:
        assert store.get("ns", "k") == "v"
