"""The text of a file given to a model: UTF-8, or for a Python module the encoding it declares.

One decision for every path that reads a project or input file as text: a task's ``files:``
and the analysis steps (`text_of`), and an isolated subagent's files and ``FILE:`` requests
(`clearance._agents.files.load_text_file`, which keeps its own caps and truncation and asks
here which encoding to read in: `file_encoding`, then `decoded` for a declared one).
"""

from __future__ import annotations

import codecs
import functools
import io
import re
import tokenize
from collections import Counter

from clearance._core.errors import ConfigError

__all__ = ["decoded", "file_encoding", "text_of"]

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
    encoding = file_encoding(rel, data)
    if encoding == "utf-8":
        try:
            return data.decode("utf-8")  # a byte order mark is kept, as it always was
        except UnicodeDecodeError as exc:
            raise ConfigError(f"file {rel!r} is not UTF-8 text: {exc.reason}",
                              field="files") from None  # fmt: skip
    return decoded(rel, data, encoding)[0]


def file_encoding(rel: str, data: bytes) -> str:
    """The encoding ``data`` (a file's bytes, or its first ones) is read in.

    ``"utf-8"`` (a byte order mark is then part of the text) unless ``rel`` is a ``.py``
    file whose coding declaration names another encoding, checked as `text_of` says.

    Raises:
        ConfigError: The declared encoding is one Python does not know, is not of text, or
            does not read ASCII as ASCII; one line naming the file.
    """
    encoding = _declared_encoding(rel, data) if rel.endswith(".py") else "utf-8"
    if encoding in _UTF8:
        return "utf-8"
    refused = _refusal(encoding)
    if refused is not None:
        raise ConfigError(f"file {rel!r} declares {encoding!r}, which {refused}", field="files")
    return encoding


def decoded(rel: str, data: bytes, encoding: str, *, final: bool = True) -> tuple[str, int]:
    """``data`` decoded in ``encoding`` (a declared one, from `file_encoding`), checked.

    Args:
        rel: The file's path, named in errors.
        data: Its bytes (its first ones, when ``final`` is false).
        encoding: The encoding `file_encoding` returned.
        final: Whether ``data`` is the whole file: when not, a character cut at the end is
            left out rather than refused.

    Returns:
        The text, and how many of ``data``'s bytes it holds (all of them when ``final``).

    Raises:
        ConfigError: ``data`` is not text in ``encoding``, or it turns bytes into a control
            character the file does not hold as that byte; one line naming the file.
    """
    try:
        text, used = (data.decode(encoding), len(data)) if final else _head(data, encoding)
    except ValueError as exc:  # UnicodeError, or a codec of its own mind
        reason = " ".join(str(getattr(exc, "reason", exc)).split())[:100]
        raise ConfigError(f"file {rel!r} is not {encoding} text, as its coding declaration "
                          f"says: {reason}", field="files") from None  # fmt: skip
    made = _made_control(text, data[:used])
    if made is not None:
        raise ConfigError(f"file {rel!r} declares {encoding!r}, which turns bytes into "
                          f"U+{ord(made):04X}, a control character the file does not hold",
                          field="files")  # fmt: skip
    return text, used


def _head(data: bytes, encoding: str) -> tuple[str, int]:
    """The text of ``data``, the first bytes of a file, and the bytes it holds.

    A character cut at the end is left out: by the codec's incremental decoder, or, for a
    codec without one, by decoding only what precedes an error in the last 8 bytes.
    """
    incremental = codecs.lookup(encoding).incrementaldecoder
    if incremental is not None:
        decoder = incremental()
        text = decoder.decode(data, final=False)
        return text, len(data) - len(decoder.getstate()[0])
    try:
        return data.decode(encoding), len(data)
    except UnicodeDecodeError as exc:
        if exc.start < len(data) - 8:
            raise
        return data[: exc.start].decode(encoding), exc.start


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
        probe = _PROBE.decode(encoding)
    except LookupError:  # a codec of bytes (rot13, zlib): Python refuses it as well
        return "is not a text encoding"
    except ValueError:
        probe = ""
    same = len(probe) == len(_PROBE) and all(
        char == chr(byte)
        for char, byte in zip(probe, _PROBE, strict=True)
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
