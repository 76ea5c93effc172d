"""The call digest: SHA-256 of a recorded call's messages and manifest, for ``verify``."""

from __future__ import annotations

from typing import Any

from clearance._core.prompt import canonical_json, sha256_text

__all__ = ["call_record_sha256", "record_sha256"]


def call_record_sha256(messages: list[dict[str, Any]], manifest: dict[str, Any]) -> str:
    """Digest of a recorded call's messages and manifest, in canonical JSON.

    The SHA-256 of ``canonical_json({"messages": messages, "manifest": manifest})``.
    Recorded with the call; ``clearance verify`` recomputes it, so an edit of any field of a
    recorded prompt or manifest (a token count included) is detected.
    """
    return record_sha256(canonical_json(messages), canonical_json(manifest))


def record_sha256(messages_json: str, manifest_json: str) -> str:
    """`call_record_sha256` from the canonical JSON of the messages and of the manifest.

    Canonical JSON sorts keys at every level (``"manifest"`` before ``"messages"``), so the
    payload is the two texts spliced into the outer object: nothing is serialized twice.
    """
    return sha256_text(f'{{"manifest":{manifest_json},"messages":{messages_json}}}')
