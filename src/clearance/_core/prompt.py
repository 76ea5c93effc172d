"""The vocabulary of prompts: messages, context items with their origin, manifests.

These are plain data. Only `clearance.ContextBuilder` assembles a `Prompt`; model providers
accept nothing else (see `clearance.models.ModelRequest`).
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

__all__ = [
    "ChatMessage",
    "ContextItem",
    "ContextManifest",
    "Prompt",
    "Role",
    "canonical_json",
    "canonical_json_sha256",
    "messages_sha256",
    "sha256_text",
]

Role = Literal["system", "user", "assistant"]


def sha256_text(text: str) -> str:
    """Hex SHA-256 of ``text`` encoded as UTF-8."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class ChatMessage:
    """One chat message.

    Attributes:
        role: ``"system"``, ``"user"`` or ``"assistant"``.
        content: The text.
    """

    role: Role
    content: str

    def to_dict(self) -> dict[str, str]:
        """The message in the OpenAI chat format (``{"role": ..., "content": ...}``)."""
        return {"role": self.role, "content": self.content}


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextItem:
    """One piece of admitted text and where it came from.

    Attributes:
        origin: ``kind:ref`` provenance: ``instructions``, ``task:<id>``,
            ``task_result:<id>``, ``message:<id>``, ``file:<path>``, ``goal``,
            ``task_status:<id>``, ``shared_memory``, ``memory:<id>`` (a long-term memory
            record), ``turn:<id>`` (a conversation turn), ``summary:<id>`` (a summary of
            compressed turns).
        title: The heading the item is rendered under.
        content: The text itself.
        tokens: Tokens of the rendered block (heading, fences and content), counted with the
            target model's tokenizer where it has one.
    """

    origin: str
    title: str
    content: str
    tokens: int
    # `sha256`, once computed: an item enters several prompts (a result, each dependent's
    # and the synthesis; an agent's instructions, each of its prompts).
    _sha256: str | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def kind(self) -> str:
        """The origin's kind, the part before the first ``:``."""
        return self.origin.split(":", 1)[0]

    @property
    def sha256(self) -> str:
        """Hex SHA-256 of ``content`` (`sha256_text`), computed once per item."""
        digest = self._sha256
        if digest is None:
            digest = sha256_text(self.content)
            object.__setattr__(self, "_sha256", digest)  # a cache: the item stays the same
        return digest

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready record for the manifest (content as a hash, not the text)."""
        return {
            "origin": self.origin,
            "title": self.title,
            "tokens": self.tokens,
            "chars": len(self.content),
            "sha256": self.sha256,
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextManifest:
    """What a prompt holds: every admitted item, its origin and token count.

    Attributes:
        subject: ``task:<id>`` for a task prompt, ``synthesis`` or ``plan`` for the
            coordinator's prompts.
        agent: The agent the prompt is for.
        items: The admitted items, in prompt order.
        total_tokens: Tokens of the whole rendered prompt.
        prompt_sha256: Hash of the rendered messages (see `messages_sha256`).
        clearance: For a task prompt, the clearance it was built under, as JSON-ready data
            (``{"task_id", "agent", "result_task_ids", "files", "memory_scopes"}``);
            ``None`` for the coordinator's prompts, which have the full view.
        compression: For a conversation prompt built after the context-window monitor
            compressed the conversation: what was dropped or summarized (see
            `clearance.CompressionRecord.to_dict`); ``None`` otherwise.
    """

    subject: str
    agent: str
    items: tuple[ContextItem, ...]
    total_tokens: int
    prompt_sha256: str
    clearance: dict[str, Any] | None = None
    compression: dict[str, Any] | None = None

    @property
    def origins(self) -> tuple[str, ...]:
        """The origins of the admitted items, in prompt order."""
        return tuple(item.origin for item in self.items)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form for the ledger (``compression`` only when set)."""
        data: dict[str, Any] = {
            "subject": self.subject,
            "agent": self.agent,
            "items": [item.to_dict() for item in self.items],
            "total_tokens": self.total_tokens,
            "prompt_sha256": self.prompt_sha256,
            "clearance": self.clearance,
        }
        if self.compression is not None:
            data["compression"] = self.compression
        return data


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, no whitespace, non-ASCII kept as is.

    The form every digest of a prompt is computed on (`messages_sha256`, the ledger's record
    digest). Sorting is recursive, so the canonical form of ``{"a": x, "b": y}`` is
    ``'{"a":' + canonical_json(x) + ',"b":' + canonical_json(y) + '}'``.

    Encoded with orjson (``OPT_SORT_KEYS``), whose text for strings, integers, booleans,
    ``None``, lists and dicts with string keys is exactly that of the standard library's
    ``json`` with ``sort_keys=True, separators=(",", ":"), ensure_ascii=False``: the digests
    recorded by earlier versions still verify. What orjson refuses (keys that are not
    strings, integers beyond 64 bits, lone surrogates) is encoded by the standard library
    as before, with its floats written by orjson too: a float is written in orjson's
    shortest form (``1e-05`` as ``0.00001``) whichever encoder writes the value around it,
    so a record's digest does not depend on which of its fields sent it to the fallback.

    Raises:
        TypeError: ``value`` holds something neither encoder can serialize.
    """
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except TypeError:  # orjson.JSONEncodeError: let the standard library try
        return _fallback(value)


def canonical_json_sha256(value: Any) -> str:
    """``sha256_text(canonical_json(value))``, hashing orjson's UTF-8 bytes as they come.

    Raises:
        TypeError: As `canonical_json`.
    """
    try:
        encoded = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except TypeError:  # as `canonical_json`: the standard library's text, encoded
        return sha256_text(_fallback(value))
    return hashlib.sha256(encoded).hexdigest()


def _orjson_float(number: float) -> str:
    """A float as orjson writes it (NaN and the infinities as ``null``, as orjson does)."""
    return orjson.dumps(number).decode()


def _fallback(value: Any) -> str:
    """`canonical_json` of what orjson refuses, its floats written as orjson writes them.

    The standard library's encoder (sorted keys, no whitespace, non-ASCII as is):
    ``json.encoder._make_iterencode`` is the standard library's own encoder loop, given the
    float writer; its C twin takes no such argument.
    """
    chunks = json.encoder._make_iterencode(  # type: ignore[attr-defined]
        {}, _no_default, json.encoder.py_encode_basestring, None, _orjson_float,
        ":", ",", True, False, True,
    )  # fmt: skip
    return "".join(chunks(value, 0))


def _no_default(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def messages_sha256(messages: tuple[ChatMessage, ...]) -> str:
    """Hash of messages in their canonical JSON form (`canonical_json`)."""
    return canonical_json_sha256([m.to_dict() for m in messages])


@dataclass(frozen=True, kw_only=True, slots=True)
class Prompt:
    """Messages ready for a model, with the manifest that accounts for every part.

    Attributes:
        messages: The chat messages, system message first.
        manifest: The admitted items and their origins.
    """

    messages: tuple[ChatMessage, ...]
    manifest: ContextManifest

    @property
    def text(self) -> str:
        """All message contents joined, for searching what a model received."""
        return "\n\n".join(m.content for m in self.messages)

    def to_dicts(self) -> list[dict[str, str]]:
        """The messages in the OpenAI chat format."""
        return [m.to_dict() for m in self.messages]
