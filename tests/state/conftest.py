"""Fixtures for the state tests: a context store's URL on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import create_engine, text


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store URL on a fresh SQLite file, or on the test PostgreSQL server (fresh tables)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    url: str = request.getfixturevalue("postgres_url")
    # Fresh tables per test (a schema of its own would need search_path): the store's and
    # its schema-version table, so that opening the store creates both again.
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE IF EXISTS store_entries"))
        conn.execute(text("DROP TABLE IF EXISTS store_schema_version"))
    engine.dispose()
    return url
