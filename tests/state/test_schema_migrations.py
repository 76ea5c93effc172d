"""`Schema`: ordered migrations that define their own tables and columns."""

import sqlite3

import pytest
from sqlalchemy import Column, Index, Integer, String, select, text

from clearance._core.errors import StoreError
from clearance._state.db import DatabaseBase, Schema, SchemaChange


def create_items(change: SchemaChange, *extra: Index) -> None:
    change.create_table(
        "items",
        Column("id", Integer, primary_key=True),
        Column("name", String(32), nullable=False),
        *extra,
    )


def schema(versions: int) -> Schema:
    made = Schema("demo_schema_version")

    @made.migration
    def _m001_items(change: SchemaChange) -> None:
        create_items(change)

    if versions >= 2:

        @made.migration
        def _m002_cached_tokens(change: SchemaChange) -> None:
            change.add_column(
                "items",
                Column("cached", Integer, nullable=False, default=0, server_default=text("0")),
            )

    return made


class Demo(DatabaseBase):
    _LABEL = "demo"

    def __init__(self, url: str, made: Schema) -> None:
        super().__init__(url)
        self._migrate(made)


def test_a_column_is_one_migration_in_the_model_and_in_an_old_database(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    old = schema(1)
    with Demo(url, old) as db, db._writing("seed") as conn:
        conn.execute(old.metadata.tables["items"].insert().values(id=1, name="old"))
    new = schema(2)
    items = new.metadata.tables["items"]
    assert [c.name for c in items.c] == ["id", "name", "cached"]
    with Demo(url, new) as db:
        with db._writing("add") as conn:
            conn.execute(items.insert().values(id=2, name="new", cached=5))
        with db._reading("read") as conn:
            rows = conn.execute(select(items).order_by(items.c.id)).all()
    assert [tuple(r) for r in rows] == [(1, "old", 0), (2, "new", 5)]
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        versions = [r[0] for r in conn.execute("SELECT version FROM demo_schema_version")]
    assert versions == [1, 2]


def test_a_database_newer_than_the_code_is_refused(tmp_path):
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    Demo(url, schema(2)).close()
    with pytest.raises(StoreError, match=r"schema version 2, newer than .* supports \(1\)"):
        Demo(url, schema(1))


def test_no_migration_may_be_added_once_the_model_is_built():
    made = schema(1)
    assert "items" in made.metadata.tables
    with pytest.raises(RuntimeError, match="after the schema's model was built"):
        made.migration(lambda change: None)


def test_a_new_file_has_version_0_and_gets_every_migration(tmp_path):
    """On SQLite the version is read with one query on the driver's connection; a file
    without the table of versions reads as version 0."""
    made = schema(2)
    with Demo(f"sqlite:///{tmp_path / 'demo.db'}", made) as db, db._reading("read") as conn:
        assert made.current_version(conn) == 2
    with Demo(f"sqlite:///{tmp_path / 'other.db'}", schema(1)) as db, db._reading("r") as conn:
        conn.exec_driver_sql("DROP TABLE demo_schema_version")
        assert made.current_version(conn) == 0


def test_an_unreadable_table_of_versions_is_a_store_error_naming_the_step(tmp_path):
    path = tmp_path / "demo.db"
    with sqlite3.connect(path) as conn:  # a table of that name, without a version column
        conn.execute("CREATE TABLE demo_schema_version (other INTEGER)")
    with pytest.raises(StoreError, match=r"cannot read the schema version .*no such column"):
        Demo(f"sqlite:///{path}", schema(1))


def test_an_index_dropped_by_a_migration_leaves_the_model_and_an_old_database(tmp_path):
    def indexed(drop: bool) -> Schema:
        made = Schema("demo_schema_version")

        @made.migration
        def _m001_items(change: SchemaChange) -> None:
            create_items(change, Index("ix_items_name", "name"))

        if drop:

            @made.migration
            def _m002_no_name_index(change: SchemaChange) -> None:
                change.drop_index("items", "ix_items_name")

        return made

    def indexes() -> list[str]:
        with sqlite3.connect(tmp_path / "demo.db") as conn:
            return [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")]

    url = f"sqlite:///{tmp_path / 'demo.db'}"
    Demo(url, indexed(False)).close()
    assert indexes() == ["ix_items_name"]
    new = indexed(True)
    assert new.metadata.tables["items"].indexes == set()
    Demo(url, new).close()
    assert indexes() == []
    # A file whose index was dropped by hand upgrades too.
    (tmp_path / "demo.db").unlink()
    Demo(url, indexed(False)).close()
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        conn.execute("DROP INDEX ix_items_name")
    Demo(url, indexed(True)).close()
    with sqlite3.connect(tmp_path / "demo.db") as conn:
        assert [r[0] for r in conn.execute("SELECT version FROM demo_schema_version")] == [1, 2]
    with pytest.raises(KeyError, match="no index 'ix_other'"):
        SchemaChange(new.metadata, None).drop_index("items", "ix_other")
