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
from clearance._core.store_rules import check_grant_pattern, check_ttl

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
            check_grant_pattern(pattern, field=where)
            if not isinstance(access, str) or access not in _ACCESS:  # a list: unhashable
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

    def intersect(self, ceiling: StoreGrants) -> StoreGrants:
        """What both grant: an agent acting for a caller never has more than the caller.

        The namespaces two patterns both cover are again one pattern (or none), so the
        intersection is exact: a namespace and operation are allowed by the result exactly
        when both ``self`` and ``ceiling`` allow them.

        Args:
            ceiling: The caller's grants.

        Returns:
            The grants both allow (empty when they share nothing).
        """
        entries: dict[str, set[str]] = {}
        for own, own_access in self.entries:
            for cap, cap_access in ceiling.entries:
                pattern = _common_pattern(own, cap)
                ops = _OPS[own_access] & _OPS[cap_access]
                if pattern is not None and ops:
                    entries.setdefault(pattern, set()).update(ops)
        return StoreGrants(
            entries=tuple(sorted((p, _access_of(ops)) for p, ops in entries.items()))
        )


_OPS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "write": frozenset({"write"}),
    "read_write": frozenset({"read", "write"}),
}


def _access_of(ops: set[str]) -> Access:
    if ops == {"read", "write"}:
        return "read_write"
    return "read" if "read" in ops else "write"


def _common_pattern(a: str, b: str) -> str | None:
    """The one pattern covering exactly the namespaces both ``a`` and ``b`` cover, or ``None``."""
    if not a.endswith("*"):
        return a if pattern_matches(b, a) else None
    if not b.endswith("*"):
        return b if pattern_matches(a, b) else None
    if a[:-1].startswith(b[:-1]):
        return a
    return b if b[:-1].startswith(a[:-1]) else None


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
        ceiling: The grants of the agent it acts for (a delegator, a child's parent), or
            ``None``: the view then allows only what both ``grants`` and ``ceiling`` allow
            (`StoreGrants.intersect`), and notes in `lent_refusals` each operation its own
            grants allow but its caller's do not.

    Raises:
        ConfigError: ``read_extends_ttl_s`` is not a TTL the store accepts (see `check_ttl`).

    Attributes:
        grants: What the view allows (the intersection, under a ceiling).
        own_grants: The agent's own grants.
        lent_refusals: ``(namespace, operation)`` of each operation refused only because
            the caller lacks the grant (a capability that would have been lent).
    """

    def __init__(
        self,
        store: ContextStore,
        *,
        agent: str,
        grants: StoreGrants,
        read_extends_ttl_s: float | None = None,
        ceiling: StoreGrants | None = None,
    ):
        check_ttl(read_extends_ttl_s, "read_extends_ttl_s")
        self._store = store
        self.agent = agent
        self.own_grants = grants
        self.grants = grants if ceiling is None else grants.intersect(ceiling)
        self.read_extends_ttl_s = read_extends_ttl_s
        self.lent_refusals: list[tuple[str, str]] = []

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
            if self.own_grants.allows(namespace, operation):
                self.lent_refusals.append((namespace, operation))
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
