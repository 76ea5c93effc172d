"""Per-agent store grants and the scoped `StoreView` agents use. Default deny.

A grant maps a namespace to an access level. A namespace ending in ``*`` grants every
namespace starting with what precedes the ``*`` (``"team/*"`` covers ``"team/notes"``); any
other namespace matches exactly. Levels: ``"read"``, ``"write"``, ``"read_write"``. Any
namespace not granted, or granted without the needed level, raises `AccessDenied` naming the
agent, the namespace and the operation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, get_args

from clearance._core.errors import AccessDenied, ConfigError

if TYPE_CHECKING:
    from clearance._state.store import ContextStore, StoreEntry

__all__ = ["Access", "StoreGrants", "StoreView"]

Access = Literal["read", "write", "read_write"]
"""What a grant allows."""

_ACCESS = frozenset(get_args(Access))


@dataclass(frozen=True, kw_only=True, slots=True)
class StoreGrants:
    """What one agent may do in the store: namespace patterns and access levels.

    Attributes:
        entries: ``(pattern, access)`` pairs, sorted by pattern; a pattern is a namespace, or
            a prefix followed by ``*``.
    """

    entries: tuple[tuple[str, Access], ...] = ()

    @classmethod
    def parse(cls, grants: Mapping[str, str]) -> StoreGrants:
        """Validate a mapping of namespace pattern to access level.

        Raises:
            ConfigError: An empty pattern, a ``*`` anywhere but at the end, or an unknown
                access level (``field`` is ``store_grants.<pattern>``).
        """
        entries: list[tuple[str, Access]] = []
        for pattern, access in grants.items():
            where = f"store_grants.{pattern}"
            if not isinstance(pattern, str) or not pattern or "*" in pattern[:-1]:
                raise ConfigError(
                    "a grant is a namespace, or a namespace prefix followed by '*'", field=where
                )
            if access not in _ACCESS:
                raise ConfigError(
                    f"access must be one of {sorted(_ACCESS)}, got {access!r}", field=where
                )
            entries.append((pattern, access))  # type: ignore[arg-type]
        return cls(entries=tuple(sorted(entries)))

    def to_dict(self) -> dict[str, str]:
        """The grants as a JSON-ready mapping."""
        return dict(self.entries)

    def allows(self, namespace: str, operation: Literal["read", "write"]) -> bool:
        """Whether ``operation`` on ``namespace`` is granted."""
        for pattern, access in self.entries:
            if pattern_matches(pattern, namespace) and (
                access == "read_write" or access == operation
            ):
                return True
        return False

    @property
    def read_patterns(self) -> frozenset[str]:
        """Patterns granting reads (``read`` or ``read_write``)."""
        return frozenset(p for p, a in self.entries if a in ("read", "read_write"))

    def __bool__(self) -> bool:
        return bool(self.entries)


def pattern_matches(pattern: str, namespace: str) -> bool:
    """Whether a grant pattern (a namespace or ``prefix*``) covers ``namespace``."""
    return namespace.startswith(pattern[:-1]) if pattern.endswith("*") else namespace == pattern


class StoreView:
    """One agent's window on a `ContextStore`: only granted namespaces, default deny.

    Writes are recorded under the view's agent. Every refused operation raises
    `AccessDenied` with ``agent``, ``resource`` (``store:<namespace>``) and ``operation``.

    Args:
        store: The store.
        agent: The agent using the view.
        grants: What it may do.
        read_extends_ttl_s: When set, every entry read through the view (``get``,
            ``get_entry``, ``get_structured``, ``query``, ``query_by_prefix``, ``search``)
            is touched: its expiry moves to at least this many seconds from now (never
            earlier; an entry without expiry keeps none), even on a read-only grant.
    """

    def __init__(
        self,
        store: ContextStore,
        *,
        agent: str,
        grants: StoreGrants,
        read_extends_ttl_s: float | None = None,
    ):
        self._store = store
        self.agent = agent
        self.grants = grants
        self.read_extends_ttl_s = read_extends_ttl_s

    def _extend(self, entries: Iterable[tuple[str, str]]) -> None:
        """Touch what was read, when reads extend expiry."""
        if self.read_extends_ttl_s is None:
            return
        for namespace, key in entries:
            self._store.touch(namespace, key, self.read_extends_ttl_s)

    def __repr__(self) -> str:
        return f"StoreView(agent={self.agent!r}, grants={self.grants.to_dict()!r})"

    def _check(self, namespace: str, operation: Literal["read", "write"]) -> None:
        if not self.grants.allows(namespace, operation):
            raise AccessDenied(self.agent, f"store:{namespace}", operation)

    def get(self, namespace: str, key: str) -> str | None:
        """`ContextStore.get`, if reads of ``namespace`` are granted.

        Raises:
            AccessDenied: Reads of ``namespace`` are not granted.
        """
        self._check(namespace, "read")
        value = self._store.get(namespace, key)
        if value is not None:
            self._extend([(namespace, key)])
        return value

    def get_entry(self, namespace: str, key: str) -> StoreEntry | None:
        """`ContextStore.get_entry`, if reads of ``namespace`` are granted.

        Raises:
            AccessDenied: Reads of ``namespace`` are not granted.
        """
        self._check(namespace, "read")
        entry = self._store.get_entry(namespace, key)
        if entry is not None:
            self._extend([(namespace, key)])
        return entry

    def get_structured(self, namespace: str, key: str) -> Any:
        """`ContextStore.get_structured`, if reads of ``namespace`` are granted.

        Raises:
            AccessDenied: Reads of ``namespace`` are not granted.
            StoreError: The value is not valid JSON.
        """
        self._check(namespace, "read")
        value = self._store.get_structured(namespace, key)
        if value is not None:
            self._extend([(namespace, key)])
        return value

    def query(self, namespace: str, limit: int = 10) -> list[StoreEntry]:
        """`ContextStore.query`, if reads of ``namespace`` are granted.

        Raises:
            AccessDenied: Reads of ``namespace`` are not granted.
        """
        self._check(namespace, "read")
        entries = self._store.query(namespace, limit)
        self._extend((e.namespace, e.key) for e in entries)
        return entries

    def query_by_prefix(self, namespace: str, prefix: str, limit: int = 20) -> list[StoreEntry]:
        """`ContextStore.query_by_prefix`, if reads of ``namespace`` are granted.

        Raises:
            AccessDenied: Reads of ``namespace`` are not granted.
        """
        self._check(namespace, "read")
        entries = self._store.query_by_prefix(namespace, prefix, limit)
        self._extend((e.namespace, e.key) for e in entries)
        return entries

    def search(self, text: str, limit: int = 10) -> list[StoreEntry]:
        """`ContextStore.search` over the namespaces this view may read, and no others.

        Each entry found is checked against the grants again before it is returned, so an
        ungranted namespace never appears, whatever the database matched.

        Raises:
            StoreError: The database could not be read.
        """
        found = self._store.search(self.grants.read_patterns, text, limit)
        entries = [e for e in found if self.grants.allows(e.namespace, "read")]
        self._extend((e.namespace, e.key) for e in entries)
        return entries

    def set(self, namespace: str, key: str, value: str, ttl_s: float | None = None) -> None:
        """`ContextStore.set` as the view's agent, if writes to ``namespace`` are granted.

        Raises:
            AccessDenied: Writes to ``namespace`` are not granted.
        """
        self._check(namespace, "write")
        self._store.set(namespace, key, value, self.agent, ttl_s)

    def set_with_extension(
        self, namespace: str, key: str, value: str, ttl_s: float | None = None
    ) -> None:
        """`ContextStore.set_with_extension` as the view's agent, if writes are granted.

        Raises:
            AccessDenied: Writes to ``namespace`` are not granted.
        """
        self._check(namespace, "write")
        if ttl_s is None:
            self._store.set_with_extension(namespace, key, value, self.agent)
        else:
            self._store.set_with_extension(namespace, key, value, self.agent, ttl_s)

    def touch(self, namespace: str, key: str, ttl_s: float | None = None) -> bool:
        """`ContextStore.touch`, if writes to ``namespace`` are granted.

        Raises:
            AccessDenied: Writes to ``namespace`` are not granted.
        """
        self._check(namespace, "write")
        return self._store.touch(namespace, key, ttl_s)

    def delete(self, namespace: str, key: str) -> bool:
        """`ContextStore.delete`, if writes to ``namespace`` are granted.

        Raises:
            AccessDenied: Writes to ``namespace`` are not granted.
        """
        self._check(namespace, "write")
        return self._store.delete(namespace, key)
