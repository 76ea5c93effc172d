"""The run ledger's hash chain: every record of a run, in write order, optionally keyed.

Every record the ledger writes (a run's state, a task's state, a task reason, a message, a
model call or its outcome, a tool call, an event) is chained, in the transaction that writes
it, as ``(kind, subject, payload_sha256)``: ``payload_sha256`` is the SHA-256 of the
record's fields in canonical JSON (`payload_sha256`; the fields of each kind are
`ENTRY_FIELDS`). A transaction appends to each run's chain one *entry*
``(seq, kind, subject, payload_sha256, chain_sha256, records)``:

- for one record, the record's own ``kind``, ``subject`` and ``payload_sha256``, and no
  ``records`` (every entry had this form before version 10 of the ledger schema);
- for several (a group commit), one *group entry* (`GROUP_KIND`): ``records`` is the
  canonical JSON list of the records' ``[kind, subject, payload_sha256]`` in write order,
  ``payload_sha256`` is that text's SHA-256 and ``subject`` the number of records
  (`group_entry`). A record's place in the chain is then its group's place and its
  position in the list, so the chain covers every record, in order, as before, with one row
  and one link per transaction instead of one per record;
- ``seq`` counts the run's entries from 1, in the order they were committed;
- ``chain_sha256`` is ``H(canonical_json([previous chain, run id, seq, kind, subject,
  payload_sha256]))``, the previous chain of the first entry being ``""``.

``H`` is SHA-256, or HMAC-SHA256 under the ledger key when one is configured: the key comes
from ``CLEARANCE_LEDGER_KEY`` (64 or more hex digits, or any text of at least 16 bytes) or from
the file named by ``CLEARANCE_LEDGER_KEY_FILE`` (same forms). A run records the key's id
(`key_id`, a digest of the key, never the key itself), so ``verify`` knows the run was keyed
and can tell a wrong key from a forged record. Records that change later (a task's state, a
run's end) append a new entry: the latest entry of a subject must match its current row.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from clearance._core.clock import utc_iso_text
from clearance._core.errors import ConfigError
from clearance._core.prompt import canonical_json
from clearance._state.db.types import JSONText

__all__ = [
    "APPEND_KINDS",
    "ENTRY_FIELDS",
    "ChainedRecord",
    "GROUP_KIND",
    "LEDGER_KEY_ENV",
    "LEDGER_KEY_FILE_ENV",
    "OPTIONAL_FIELDS",
    "SUBJECT_FIELDS",
    "UPSERT_KINDS",
    "chain_sha256",
    "group_entry",
    "group_records",
    "key_id",
    "load_ledger_key",
    "payload_sha256",
]

LEDGER_KEY_ENV = "CLEARANCE_LEDGER_KEY"
"""Environment variable holding the ledger key (hex, or raw text of at least 16 bytes)."""

LEDGER_KEY_FILE_ENV = "CLEARANCE_LEDGER_KEY_FILE"
"""Environment variable naming a file that holds the ledger key (used if the key is unset)."""

_MIN_KEY_BYTES = 16
_MAX_KEY_FILE_BYTES = 4096
_HEX = re.compile(r"(?:[0-9a-fA-F]{2}){32,}")

ENTRY_FIELDS: Mapping[str, tuple[str, ...]] = {
    "run": (
        "run_id", "team", "goal", "status", "graph", "config", "synthesis", "error",
        "requests", "prompt_tokens", "completion_tokens", "created_at", "finished_at",
        "chain_key_id",
    ),
    "task": (
        "task_id", "title", "assignee", "depends_on", "memory_scope", "status", "result",
        "error", "started_at", "finished_at",
    ),
    "task_reason": ("task_id", "status", "error", "recorded_at"),
    "message": ("message_id", "sender", "recipient", "content", "created_at"),
    "call": (
        "call_id", "subject", "agent", "model_id", "prompt_sha256", "record_sha256",
        "response", "finish_reason", "requests", "prompt_tokens", "completion_tokens",
        "error", "started_at", "latency_s", "pending",
    ),
    "tool_call": (
        "tool_call_id", "subject", "agent", "step", "name", "arguments", "result",
        "is_error", "store_reads", "chain", "created_at",
    ),
    "event": ("event_id", "kind", "subject", "data", "created_at"),
}  # fmt: skip
"""The fields of a record each kind of entry digests (the run's lease is not among them).

A call's prompt is covered through ``record_sha256`` (`call_record_sha256` of its messages
and manifest), which ``verify`` recomputes from the recorded messages rather than reads; what
it was asked besides the prompt (``parameters``) is an `OPTIONAL_FIELDS` field."""

OPTIONAL_FIELDS: Mapping[str, tuple[str, ...]] = {
    "call": ("cached_prompt_tokens", "usage_counted", "parameters")
}
"""Fields added to a kind after records were chained: digested when not ``None``, so a record
made before the field existed keeps its digest, and a value set, changed or removed later
changes it."""

SUBJECT_FIELDS: Mapping[str, str] = {
    "run": "run_id",
    "task": "task_id",
    "task_reason": "task_id",
    "message": "message_id",
    "call": "call_id",
    "tool_call": "tool_call_id",
    "event": "event_id",
}
"""The field whose value is an entry's ``subject``."""

UPSERT_KINDS = frozenset({"run", "task", "message", "call"})
"""Kinds whose row changes in place: its latest entry must match it."""

APPEND_KINDS = frozenset({"task_reason", "tool_call", "event"})
"""Kinds whose rows are only appended: one entry per row, in the same order."""

GROUP_KIND = "group"
"""The kind of an entry that chains several records of one transaction (`group_entry`)."""

ChainedRecord = tuple[str, str, str]
"""``(kind, subject, payload_sha256)`` of one chained record."""


def load_ledger_key(environ: Mapping[str, str] | None = None) -> bytes | None:
    """The ledger key from the environment, or ``None`` when none is configured.

    ``CLEARANCE_LEDGER_KEY`` wins over ``CLEARANCE_LEDGER_KEY_FILE``. A value of 64 or more
    hex digits (an even number) is decoded as hex; anything else is taken as UTF-8 text. A
    key file's surrounding whitespace is ignored.

    Args:
        environ: Where to look; ``None`` means `os.environ`.

    Raises:
        ConfigError: The variable is set but the key is shorter than 16 bytes, or the key
            file cannot be read or is over 4096 bytes.
    """
    env = os.environ if environ is None else environ
    raw = env.get(LEDGER_KEY_ENV)
    source = field = LEDGER_KEY_ENV
    if raw is None:
        path = env.get(LEDGER_KEY_FILE_ENV)
        if not path:
            return None
        source, field = f"{LEDGER_KEY_FILE_ENV} ({path})", LEDGER_KEY_FILE_ENV
        try:
            data = _read_key_file(path)
        except OSError as exc:
            raise ConfigError(
                f"cannot read the ledger key file: {exc.strerror or exc}", field=LEDGER_KEY_FILE_ENV
            ) from exc
        if len(data) > _MAX_KEY_FILE_BYTES:
            raise ConfigError(
                f"the ledger key file is over {_MAX_KEY_FILE_BYTES} bytes",
                field=LEDGER_KEY_FILE_ENV,
            )
        try:
            raw = data.decode("utf-8").strip()
        except UnicodeDecodeError:
            return _checked_key(data.strip(), source, field)
    text = raw.strip()
    try:  # a variable of bytes that are not UTF-8 holds them as surrogate escapes
        key = (
            bytes.fromhex(text) if _HEX.fullmatch(text) else text.encode("utf-8", "surrogateescape")
        )
    except UnicodeEncodeError:
        raise ConfigError(
            f"the ledger key from {source} is not text (use hex digits)", field=field
        ) from None
    return _checked_key(key, source, field)


def _read_key_file(path: str) -> bytes:
    """Up to ``_MAX_KEY_FILE_BYTES + 1`` bytes of the key file ``path``.

    Opened without blocking, so a FIFO nobody writes to reads as empty (and is refused as
    too short) instead of waiting for ever; a pipe with a writer (``<(pass show key)``) is
    read as it is written.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.set_blocking(fd, True)
        chunks: list[bytes] = []
        size = 0
        while size <= _MAX_KEY_FILE_BYTES:
            chunk = os.read(fd, _MAX_KEY_FILE_BYTES + 1 - size)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _checked_key(key: bytes, source: str, field: str) -> bytes:
    if len(key) < _MIN_KEY_BYTES:
        raise ConfigError(
            f"the ledger key from {source} is {len(key)} bytes; use at least {_MIN_KEY_BYTES} "
            "(for example 64 hex digits from `openssl rand -hex 32`)",
            field=field,
        )
    return key


def key_id(key: bytes) -> str:
    """A short public id of ``key`` (16 hex digits of an HMAC of a fixed text): not the key."""
    return hmac.new(key, b"clearance ledger key id", hashlib.sha256).hexdigest()[:16]


_AS_IS = frozenset({str, int, float, type(None), list, dict})
"""Classes `_normal` returns unchanged (not ``bool``, a subclass of ``int``)."""


def _normal(value: Any) -> Any:
    if isinstance(value, datetime):
        if value.__class__ is datetime and value.tzinfo is UTC:  # the clock's: memoized
            return utc_iso_text(value)
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC).isoformat(timespec="microseconds")
    if isinstance(value, bool):
        return int(value)
    return value


def _canonical_utf8(fields: dict[str, Any], spliced: dict[str, str] | None) -> bytes:
    """``canonical_json(fields).encode("utf-8", "surrogatepass")``, as orjson's bytes when it can.

    orjson's output is that text's UTF-8 already; what it refuses (lone surrogates, keys
    that are not strings...) goes through `canonical_json` and is encoded as before, each
    field in ``spliced`` (an ``orjson.Fragment`` of that JSON text) parsed back first.
    """
    try:
        return orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # orjson.JSONEncodeError
        if spliced:
            fields = {**fields, **{name: json.loads(text) for name, text in spliced.items()}}
        return canonical_json(fields).encode("utf-8", "surrogatepass")


def _splice(
    fields: dict[str, Any], name: str, text: str, spliced: dict[str, str] | None
) -> dict[str, str]:
    """Put ``text`` (canonical JSON) in ``fields`` as it is; return ``spliced`` with it."""
    fields[name] = orjson.Fragment(str(text))  # orjson takes no subclass of str
    return {**(spliced or {}), name: text}


def payload_sha256(kind: str, row: Mapping[str, Any]) -> str:
    """The digest of a record: SHA-256 of its `ENTRY_FIELDS` in canonical JSON.

    Times are normalized to UTC ISO text with microseconds (a naive time is taken as UTC),
    booleans to integers; a missing field counts as ``None``. A `JSONText` value (canonical
    JSON already, as a run's graph is kept) is spliced in as it is (``orjson.Fragment``):
    the text the value it holds, read back, is digested as. An `OPTIONAL_FIELDS` field is
    digested only when it is not ``None``.

    Raises:
        KeyError: ``kind`` is not a kind of entry.
    """
    get = row.get
    fields = {}
    spliced: dict[str, str] | None = None  # JSONText fields, spliced in as orjson fragments
    for name in ENTRY_FIELDS[kind]:
        value: Any = get(name)
        # Text, numbers, None, lists and dicts are digested as they are: the common case,
        # checked first; then the clock's times, whose text is memoized.
        cls = value.__class__
        if cls in _AS_IS:
            fields[name] = value
        elif cls is datetime and value.tzinfo is UTC:
            fields[name] = utc_iso_text(value)
        elif cls is JSONText:
            spliced = _splice(fields, name, value, spliced)
        else:
            fields[name] = _normal(value)
    for name in OPTIONAL_FIELDS.get(kind, ()):
        value = get(name)
        if value is None:
            continue
        if value.__class__ is JSONText:
            spliced = _splice(fields, name, value, spliced)
        else:
            fields[name] = value if value.__class__ in _AS_IS else _normal(value)
    # "surrogatepass": a lone surrogate (text from a record made before such text was
    # refused) still has one well-defined encoding, so its record can be chained and checked.
    return hashlib.sha256(_canonical_utf8(fields, spliced)).hexdigest()


def chain_sha256(
    previous: str, run_id: str, seq: int, kind: str, subject: str, payload: str, key: bytes | None
) -> str:
    """The chain value of one entry (SHA-256, or HMAC-SHA256 with ``key``).

    Args:
        previous: The chain value of entry ``seq - 1``; ``""`` for the first entry.
        run_id: The run.
        seq: The entry's position in the run (from 1).
        kind: A key of `ENTRY_FIELDS`.
        subject: The record's id (`SUBJECT_FIELDS`).
        payload: The record's `payload_sha256`.
        key: The ledger key, or ``None`` for an unkeyed chain.
    """
    link = [previous, run_id, seq, kind, subject, payload]
    try:  # orjson's bytes are the canonical text's UTF-8
        message = orjson.dumps(link)
    except TypeError:  # orjson.JSONEncodeError: as before (a lone surrogate fails to encode)
        message = canonical_json(link).encode("utf-8")
    if key is None:
        return hashlib.sha256(message).hexdigest()
    return hmac.new(key, message, hashlib.sha256).hexdigest()


def group_entry(records: Sequence[ChainedRecord]) -> tuple[str, str, str]:
    """The ``(subject, payload_sha256, records text)`` of a group entry chaining ``records``.

    The text is the canonical JSON of ``[[kind, subject, payload_sha256], ...]`` in write
    order; the payload digest is the SHA-256 of its UTF-8 bytes; the subject is the number
    of records, in decimal.
    """
    # Both encoders write a tuple as a JSON array: the records need no copy as lists.
    members = records if isinstance(records, list | tuple) else list(records)
    try:
        data = orjson.dumps(members)
    except TypeError:  # orjson.JSONEncodeError: text orjson refuses (a lone surrogate)
        data = canonical_json(members).encode("utf-8", "surrogatepass")
    text = data.decode("utf-8", "surrogatepass")
    return str(len(members)), hashlib.sha256(data).hexdigest(), text


def group_records(subject: str, payload: str, text: str) -> list[ChainedRecord]:
    """The records a group entry chains, checked against its subject and payload digest.

    Args:
        subject: The entry's subject (the number of records).
        payload: The entry's ``payload_sha256``.
        text: The entry's ``records`` text.

    Raises:
        ValueError: The text does not digest to ``payload``, is not a list of
            ``[kind, subject, digest]`` texts of known kinds, or its length is not
            ``subject``.
    """
    if hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest() != payload:
        raise ValueError("its records do not digest to its payload")
    try:
        members = orjson.loads(text)
    except orjson.JSONDecodeError:  # orjson refuses a lone surrogate; json reads it
        try:
            members = json.loads(text)
        except ValueError as exc:
            raise ValueError("its records are not JSON") from exc
    if not isinstance(members, list) or str(len(members)) != subject:
        raise ValueError("its records are not the list its subject counts")
    records: list[ChainedRecord] = []
    for member in members:
        if (
            not isinstance(member, list)
            or len(member) != 3
            or not all(isinstance(part, str) for part in member)
            or member[0] not in ENTRY_FIELDS
        ):
            raise ValueError("a record of it is not [kind, subject, payload_sha256]")
        records.append((member[0], member[1], member[2]))
    return records
