"""The database layer the stores share (SQLAlchemy Core on SQLite or PostgreSQL).

- `engine`: `DatabaseBase`, the engine's lifecycle, transactions and migration run.
- `opening`: `open_engine`, the URL's checks and each database's connection settings
  (a deadline to connect to PostgreSQL).
- `sqlite`: SQLite pragmas, write-ahead logging, ``BEGIN IMMEDIATE``, read-only files,
  the file an SQLite URL names.
- `held`: `HeldConnections`, one connection per thread on an SQLite file.
- `fastpath`: `DriverStatement`, SQLAlchemy's compiled SQL run on the DB-API connection.
- `migrations`: `Schema` and `SchemaChange`, ordered migrations declaring their tables.
- `types`: `UTCDateTime`, `JSONText` and `canonical_json_text`.
- `failures`: URL masking and one-line causes for error messages.
"""

from clearance._state.db.engine import DatabaseBase
from clearance._state.db.failures import failure_cause, mask_url
from clearance._state.db.fastpath import DriverStatement, compiled_statement, run_on_driver
from clearance._state.db.migrations import Migration, Schema, SchemaChange, version_table
from clearance._state.db.sqlite import BUSY_TIMEOUT_MS
from clearance._state.db.types import JSONText, UTCDateTime, canonical_json_text

__all__ = [
    "BUSY_TIMEOUT_MS",
    "DatabaseBase",
    "DriverStatement",
    "compiled_statement",
    "run_on_driver",
    "JSONText",
    "canonical_json_text",
    "Migration",
    "Schema",
    "SchemaChange",
    "UTCDateTime",
    "failure_cause",
    "mask_url",
    "version_table",
]
