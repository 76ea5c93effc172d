"""Where runs, the store and the team file's schema live unless told otherwise.

Plain values, cheap to import: the command line's options take them as defaults, so they live
apart from the ledger and the store (which import SQLAlchemy) and the schema's generator.
"""

__all__ = ["DEFAULT_LEDGER_URL", "DEFAULT_STORE_URL", "SCHEMA_ID"]

DEFAULT_LEDGER_URL = "sqlite:///.clearance/runs.db"
"""Where runs are recorded unless told otherwise (relative to the working directory)."""

DEFAULT_STORE_URL = "sqlite:///.clearance/store.db"
"""Where the store lives unless told otherwise (relative to the working directory)."""

SCHEMA_ID = "team-file.schema.json"
"""The team file's JSON Schema's file name: ``docs/`` holds it, ``clearance init`` writes it
beside a team."""
