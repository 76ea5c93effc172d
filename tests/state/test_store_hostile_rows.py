"""A store file edited by hand, and hostile arguments: one `StoreError`, never a traceback.

SQLite keeps whatever a row edited by hand holds. A ``BLOB`` value came back as bytes, which
an agent's prompt, the ledger's digest of what it read and ``clearance store get`` (which
printed ``b'...'``) cannot take; a time column holding text that is not a time raised
``ValueError`` out of every read that returned the row. Both are now a `MalformedRecord` (a
`StoreError`) naming the store. A value of JSON nested past the interpreter's stack raised
``RecursionError`` from `ContextStore.get_structured`; a grant whose access level is a list
raised ``TypeError``; a TTL that is an integer of over 4,300 digits raised ``ValueError``
while its error message was written. Each is now the error the API documents.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import ConfigError, ContextStore, StoreError
from clearance._core.errors import MalformedRecord
from clearance._state.grants import StoreGrants
from clearance.cli import app


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def store(path: Path) -> Iterator[ContextStore]:
    with ContextStore(f"sqlite:///{path}") as s:
        s.set("ns", "k", "value", "writer")
        yield s


def edit(path: Path, sql: str) -> None:
    conn = sqlite3.connect(path)
    conn.execute(sql)
    conn.commit()
    conn.close()


@pytest.mark.parametrize("column", ["value", "agent", "key"])
def test_a_blob_in_a_text_column_is_a_malformed_record(
    store: ContextStore, path: Path, column: str
) -> None:
    edit(path, f"UPDATE store_entries SET {column} = X'00ff'")
    with pytest.raises(MalformedRecord, match=f"its {column} is not text"):
        store.query("ns")
    with pytest.raises(MalformedRecord, match=str(path)):
        store.search(["*"], "")
    if column != "key":
        with pytest.raises(MalformedRecord, match="'ns/k'"):
            store.get_entry("ns", "k")
    if column == "value":
        for read in (store.get, store.get_structured):
            with pytest.raises(MalformedRecord, match="its value is not text"):
                read("ns", "k")


@pytest.mark.parametrize("column", ["created_at", "updated_at", "expires_at"])
@pytest.mark.parametrize("held", ["not a time", "9999-99-99 00:00:00", "zzz"])
def test_a_time_column_holding_no_time_is_a_malformed_record(
    store: ContextStore, path: Path, column: str, held: str
) -> None:
    edit(path, f"UPDATE store_entries SET {column} = '{held}'")
    reads = [
        lambda: store.get_entry("ns", "k"),
        lambda: store.query("ns"),
        lambda: store.query_by_prefix("ns", "k"),
        lambda: store.search(["ns"], "val"),
    ]
    for read in reads:
        with pytest.raises(MalformedRecord, match=f"{held!r} where a time belongs") as caught:
            read()
        assert str(path) in str(caught.value)


def test_an_expired_row_with_a_number_for_its_expiry_stays_unseen(
    store: ContextStore, path: Path
) -> None:
    edit(path, "UPDATE store_entries SET expires_at = 12345")  # sorts before any text time
    assert store.get("ns", "k") is None
    assert store.query("ns") == []
    assert store.cleanup() == 1


def test_json_nested_past_the_stack_is_a_store_error(store: ContextStore) -> None:
    store.set("ns", "deep", "[" * 100_000 + "]" * 100_000, "writer")
    with pytest.raises(StoreError, match="nested too deeply"):
        store.get_structured("ns", "deep")


@pytest.mark.parametrize("access", [["read"], {"read": 1}, {"read"}])
def test_an_access_level_that_is_not_text_is_a_config_error(access: object) -> None:
    with pytest.raises(ConfigError, match="access must be one of"):
        StoreGrants.parse({"notes/*": access})  # type: ignore[dict-item]


@pytest.mark.parametrize("ttl_s", [10**5000, -(10**5000), 10**31], ids=["huge", "-huge", "big"])
def test_a_ttl_of_a_huge_integer_is_a_config_error(store: ContextStore, ttl_s: int) -> None:
    with pytest.raises(ConfigError, match="an integer of"):
        store.set("ns", "k", "v", "writer", ttl_s)
    with pytest.raises(ConfigError, match="an integer of"):
        store.touch("ns", "k", ttl_s)


def test_the_cli_reports_a_hand_edited_row_in_one_line(store: ContextStore, path: Path) -> None:
    store.set("ns", "k2", "other", "writer")
    store.close()
    edit(path, "UPDATE store_entries SET value = X'00ff' WHERE key = 'k'")
    edit(path, "UPDATE store_entries SET created_at = 'junk' WHERE key = 'k2'")
    db = f"sqlite:///{path}"
    for args in (["get", "ns", "k"], ["query", "ns"], ["query", "ns", "--json"]):
        result = CliRunner().invoke(app, ["store", *args, "--db", db])
        lines = result.output.splitlines()
        assert result.exit_code == 2, result.output
        assert len(lines) == 1 and lines[0].startswith("error: "), result.output
        assert "b'" not in result.output and "Traceback" not in result.output
