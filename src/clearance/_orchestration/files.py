"""Reading the files a task is cleared to see, confined to the run's input root."""

from __future__ import annotations

import functools
import io
import re
import tokenize
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from clearance._core.confined import read_bytes_confined
from clearance._core.errors import ConfigError, LimitExceeded

__all__ = ["DEFAULT_MAX_FILE_BYTES", "read_task_files", "text_of"]

DEFAULT_MAX_FILE_BYTES = 256 * 1024

_CONTROL = re.compile("[\x00-\x08\x0b\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
"""Control characters (tab, line breaks and form feed aside), DEL, C1, the bidirectional
embeddings, overrides and isolates, and lone surrogates."""
_UTF8 = frozenset({"utf-8", "utf-8-sig"})
_PROBE = bytes(c for c in range(0x20, 0x7F) if c != 0x5C) + (
    b"\t\n\r\x0c\\x41\\u0041+AEE-.xn--ls8h.~{A~}"
)
"""Printable ASCII, then the escapes of codecs that make one character of several ASCII
bytes (``unicode_escape``, ``raw_unicode_escape``, UTF-7, IDNA, HZ): a source encoding
must read each byte of it as one character, each letter, digit and space as itself."""


def read_task_files(
    root: Path, paths: Iterable[str], *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> dict[str, str]:
    """Read the text of each path, relative to ``root`` (see `text_of`).

    Each file is opened with `read_bytes_confined`: component by component beneath
    ``root``, so neither a link nor a folder swapped for a link during the read leads
    outside it; only regular files are read, and at most ``max_file_bytes + 1`` bytes.

    Args:
        root: The input root; every path must stay inside it (links included).
        paths: Relative paths, as listed in a task's ``files``.
        max_file_bytes: Largest file accepted, in bytes.

    Returns:
        Path (as given) → file contents, in the given order.

    Raises:
        PathEscapeError: A path is absolute, has a ``..`` component, or leads outside
            ``root`` through a link.
        ConfigError: A path does not exist, is not a regular file, or is not text (see
            `text_of`).
        LimitExceeded: A file is larger than ``max_file_bytes`` (``max_file_bytes``).
    """
    contents: dict[str, str] = {}
    for rel in paths:
        try:
            read = read_bytes_confined(root, rel, max_bytes=max_file_bytes)
        except ConfigError as exc:
            raise ConfigError(str(exc), field="files") from None
        if read.truncated:
            raise LimitExceeded("max_file_bytes", value=read.size, maximum=max_file_bytes,
                                subject=rel)  # fmt: skip
        contents[rel] = text_of(rel, read.data)
    return contents


def text_of(rel: str, data: bytes) -> str:
    """The text of a file's bytes: UTF-8, or for a ``.py`` file the encoding it declares.

    A Python module is decoded as Python reads it (`tokenize.detect_encoding`, PEP 263): a
    coding declaration (``# -*- coding: latin-1 -*-``) in its first two lines, else UTF-8.
    A declared encoding must read ASCII as ASCII, one character per byte (`_refusal`: not
    UTF-7, whose ``+ABs-`` is an escape character, nor ``unicode_escape``), and may not
    turn bytes into a control character the file does not hold as that very byte (a NUL,
    a bidirectional override): such text would reach a prompt, a report or a terminal
    that the file's own bytes never showed.

    Args:
        rel: The file's path, to name it in errors and to tell a ``.py`` file.
        data: Its bytes.

    Raises:
        ConfigError: The data holds a NUL byte (binary), is not text in its encoding, or
            declares an encoding Python does not know, that is not of text, that does not
            read ASCII as ASCII, or that makes a control character of other bytes; one
            line naming the file.
    """
    if b"\x00" in data:
        raise ConfigError(f"file {rel!r} is binary, not text", field="files")
    encoding = _declared_encoding(rel, data) if rel.endswith(".py") else "utf-8"
    if encoding in _UTF8:
        try:
            return data.decode("utf-8")  # a byte order mark is kept, as it always was
        except UnicodeDecodeError as exc:
            raise ConfigError(f"file {rel!r} is not UTF-8 text: {exc.reason}",
                              field="files") from None  # fmt: skip
    refused = _refusal(encoding)
    if refused is not None:
        raise ConfigError(f"file {rel!r} declares {encoding!r}, which {refused}", field="files")
    try:
        text = data.decode(encoding)
    except ValueError as exc:  # UnicodeError, or a codec of its own mind
        reason = " ".join(str(getattr(exc, "reason", exc)).split())[:100]
        raise ConfigError(f"file {rel!r} is not {encoding} text, as its coding declaration "
                          f"says: {reason}", field="files") from None  # fmt: skip
    made = _made_control(text, data)
    if made is not None:
        raise ConfigError(f"file {rel!r} declares {encoding!r}, which turns bytes into "
                          f"U+{ord(made):04X}, a control character the file does not hold",
                          field="files")  # fmt: skip
    return text


def _declared_encoding(rel: str, data: bytes) -> str:
    """The encoding a Python module declares (PEP 263), normalized; ``"utf-8"`` if none."""
    lines = io.BytesIO(data)
    try:
        encoding, _ = tokenize.detect_encoding(lines.readline)
    except SyntaxError as exc:
        message = str(exc.msg)
        if message.startswith("unknown encoding"):
            name = message.rsplit(": ", 1)[-1][:60]
            raise ConfigError(f"file {rel!r} declares an encoding Python does not know: "
                              f"{name!r}", field="files") from None  # fmt: skip
        if message.startswith("encoding problem"):
            raise ConfigError(f"file {rel!r} starts with a UTF-8 byte order mark but declares "
                              "another encoding", field="files") from None  # fmt: skip
        return "utf-8"  # a first line that is not UTF-8: the UTF-8 decoding says where
    return encoding


@functools.cache  # of the codecs Python knows (`tokenize.detect_encoding` looked it up)
def _refusal(encoding: str) -> str | None:
    r"""Why a declared encoding is not read (the end of a sentence), or ``None``.

    PEP 263 asks of a source encoding that it read ASCII as ASCII; Python's tokenizer
    still takes a codec that builds characters from several ASCII bytes (``+ABs-`` in
    UTF-7, ``\x1b`` in ``unicode_escape`` is an escape character; punycode decodes in
    time quadratic in the file's size). Such a file is refused: see `_PROBE`.
    """
    try:
        decoded = _PROBE.decode(encoding)
    except LookupError:  # a codec of bytes (rot13, zlib): Python refuses it as well
        return "is not a text encoding"
    except ValueError:
        decoded = ""
    same = len(decoded) == len(_PROBE) and all(
        char == chr(byte)
        for char, byte in zip(decoded, _PROBE, strict=True)
        if chr(byte).isalnum() or chr(byte).isspace()
    )
    return None if same else "does not read ASCII text as ASCII"


def _made_control(text: str, data: bytes) -> str | None:
    """The first control character of ``text`` that ``data`` does not hold as that byte.

    A single-byte encoding (latin-1) decodes a control byte to itself; a character above
    U+00FF (an override, a surrogate) cannot be one byte, so it was made of others.
    """
    found = Counter(_CONTROL.findall(text))
    made = {c for c, n in found.items() if ord(c) > 0xFF or n > data.count(ord(c))}
    return next((m[0] for m in _CONTROL.finditer(text) if m[0] in made), None)
