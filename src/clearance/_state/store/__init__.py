"""The context store: durable, namespaced key/value knowledge with TTL.

- `context_store`: `ContextStore`, its reads and writes.
- `entry`: `StoreEntry`, what the ledger records of a read, and the checks of what is
  written (TTL, text, limits).
- `schema`: the table, its migrations and every statement, built once per dialect.
"""

from clearance._state.store.context_store import DEFAULT_STORE_URL, ContextStore
from clearance._state.store.entry import (
    DEFAULT_EXTENSION_TTL_S,
    MAX_AGENT_CHARS,
    MAX_KEY_CHARS,
    MAX_NAME_BYTES,
    MAX_NAMESPACE_CHARS,
    MAX_TTL_S,
    MAX_VALUE_BYTES,
    StoreEntry,
    read_record,
)
from clearance._state.store.schema import escape_like

__all__ = [
    "DEFAULT_EXTENSION_TTL_S",
    "DEFAULT_STORE_URL",
    "MAX_AGENT_CHARS",
    "MAX_KEY_CHARS",
    "MAX_NAMESPACE_CHARS",
    "MAX_NAME_BYTES",
    "MAX_TTL_S",
    "MAX_VALUE_BYTES",
    "ContextStore",
    "StoreEntry",
    "escape_like",
    "read_record",
]
