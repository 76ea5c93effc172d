"""Where a credential is taken out of what is shown, recorded or sent on: the one place.

A database URL (``postgresql://user:password@host/db?sslpassword=...``), an API server's base
URL (``http://user:password@host/v1?api_key=...``), an MCP endpoint and any text that may
quote one (an error of a driver or a server) pass through here before they reach a terminal,
a report, a span or the ledger.

- `mask_url`: a URL with its password and the values of its secret query keys as `MASK`.
  The password is read as SQLAlchemy reads it (up to the first ``@`` after ``user:``) and,
  when the host that follows still holds an ``@`` (a password with an unencoded ``@``), up
  to the last ``@`` before the host; it may hold ``:``, ``/``, ``?`` or ``#``. A string that
  is no URL at all is masked by the same rules, so a mistyped URL is not shown whole.
- `url_secrets`: the secret parts of a URL (password as written and decoded, the Basic
  credentials an HTTP client makes of it, secret query values, or every query value), for
  `mask_text`.
- `header_secrets`: the secret parts of an HTTP header's value (``Bearer <token>``: the
  value and the token), for `mask_text`.
- `mask_text`: a text with the credentials of every URL it quotes masked, and each given
  secret (an API key, a URL's secrets) replaced.
- `mask_cut`: a short text with what is left of a secret its producer cut short (a
  validation error's ``'head...tail'``) masked too.
- `password_holds_at`: whether a URL's password holds an unencoded ``@``, which a driver
  would read as part of the host (and send to a name server, and quote in its errors).
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterable
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

__all__ = [
    "MASK",
    "MIN_SECRET_CHARS",
    "header_secrets",
    "mask_cut",
    "mask_text",
    "mask_url",
    "password_holds_at",
    "url_secrets",
]

MASK = "***"
"""What a masked secret reads as."""

MIN_SECRET_CHARS = 4
"""Shortest secret `mask_text` replaces wherever it occurs: a shorter one (``x``, ``-``)
would garble the text around every occurrence of its letters. A URL's password and secret
query values are masked in place whatever their length."""

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")  # as SQLAlchemy reads it
_USER = re.compile(r"[^:/]*:")  # SQLAlchemy's username, then the colon
# ``password``, ``sslpassword``, ``passwd``; ``api_key``, ``access_token``, ``client-secret``,
# ``sig``...: a name ending in a word that names a secret (``max_tokens`` does not). Every
# repetition is bounded and every match starts after a separator, so a megabyte of a
# server's text is scanned in linear time.
_SECRET_NAME = (
    r"(?:[\w.\-]{0,64}?pass(?:word|wd)"
    r"|(?:[\w.\-]{0,64}[_.\-])?(?:pwd|secret|token|apikey|key|auth|credentials?|signature|sig))"
)
_QUERY_SECRET = re.compile(rf"(?i)((?:^|(?<=[?&;\s])){_SECRET_NAME}=)[^&;\s#'\"]*")
_TEXT_USERINFO = re.compile(
    r"((?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,32}://[^\s:/@'\"]{0,256}:)[^\s@'\"]{0,512}@"
)


def _password_span(url: str) -> tuple[int, int] | None:
    """Where the password of ``url`` starts and ends, or ``None`` for a URL without one."""
    scheme = _SCHEME.match(url)
    start = scheme.end() if scheme else 0
    user = _USER.match(url, start)
    if user is None:
        return None
    end = url.find("@", user.end())
    if end < 0:
        return None
    host = re.match(r"[^/?]*", url[end + 1 :])
    assert host is not None
    if "@" in host.group():  # an unencoded ``@`` in the password: up to the host's own
        end += 1 + host.group().rindex("@")
    return user.end(), end


def password_holds_at(url: str) -> bool:
    """Whether ``url``'s password holds an ``@`` not written ``%40`` (see the module)."""
    span = _password_span(url)
    return span is not None and "@" in url[span[0] : span[1]]


def mask_url(url: str, *, whole_query: bool = False) -> str:
    """``url`` with its password and secret query values as `MASK`, even when it does not parse.

    Args:
        url: A database, API or MCP URL (or what was given as one).
        whole_query: Mask the whole query, whatever its keys (an MCP endpoint's query may
            hold a token under any name).
    """
    span = _password_span(url)
    if span is not None:
        url = f"{url[: span[0]]}{MASK}{url[span[1] :]}"
    if whole_query:
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is not None and parts.query:
            return urlunsplit(parts._replace(query=MASK))
    return _QUERY_SECRET.sub(rf"\1{MASK}", url)


def url_secrets(url: str | None, *, whole_query: bool = False) -> tuple[str, ...]:
    """The secret parts of ``url`` (``None``: none), for `mask_text`.

    Its password (as written and decoded), the HTTP Basic credentials a client sends for its
    user and password, and its secret query values.

    Args:
        url: A database, API or MCP URL.
        whole_query: Every query value, whatever its key (an MCP endpoint's query may hold a
            token under any name), as `mask_url` masks it.
    """
    if not url:
        return ()
    found: list[str] = []
    span = _password_span(url)
    if span is not None:
        password = url[span[0] : span[1]]
        user = url[: span[0] - 1]
        scheme = _SCHEME.match(user)
        user = user[scheme.end() :] if scheme else user
        pair = f"{unquote(user)}:{unquote(password)}".encode()
        found += [password, unquote(password), base64.b64encode(pair).decode("ascii")]
    for match in _QUERY_SECRET.finditer(url):
        value = url[match.end(1) : match.end()]
        found += [value, unquote(value)]
    if whole_query:
        for piece in re.split(r"[&;]", url.partition("?")[2].partition("#")[0]):
            value = piece.partition("=")[2] if "=" in piece else piece
            found += [value, unquote(value), unquote_plus(value)]
    return tuple(s for s in dict.fromkeys(found) if s)


def header_secrets(value: str) -> tuple[str, ...]:
    """The secret parts of an HTTP header's value (``Authorization: ...``), for `mask_text`.

    The value itself and, after an authentication scheme (``Bearer <token>``,
    ``Basic <base64>``), the credentials alone; for ``Basic``, also the ``user:password``
    they decode to and the password.
    """
    found = [value, value.strip()]
    scheme, _, credentials = value.strip().partition(" ")
    credentials = credentials.strip()
    if credentials:
        found.append(credentials)
        if scheme.lower() == "basic":
            try:
                pair = base64.b64decode(credentials, validate=True).decode("utf-8")
            except (ValueError, UnicodeDecodeError):
                pair = ""
            found += [pair, pair.partition(":")[2]]
    return tuple(s for s in dict.fromkeys(found) if s)


def mask_text(text: str, secrets: Iterable[str] = (), *, label: str = MASK) -> str:
    """``text`` with each URL's credentials masked and each of ``secrets`` replaced.

    A URL's password and secret query values become `MASK`; each of ``secrets`` of at least
    `MIN_SECRET_CHARS` characters becomes ``label``. Longer secrets are replaced first, so
    one that holds another is replaced whole.
    """
    for secret in sorted(set(secrets), key=len, reverse=True):
        if len(secret) >= MIN_SECRET_CHARS:
            text = text.replace(secret, label)
    text = _TEXT_USERINFO.sub(rf"\1{MASK}@", text)
    return _QUERY_SECRET.sub(rf"\1{MASK}", text)


_CUT_MARK = re.compile(r"(\.\.\.|\u2026)")  # where a producer cut a value short: ``...``, ``…``
_CUT_SHOWN = 3  # the fewest characters of a secret left by a cut that are masked (both sides)
_CUT_MAX = 64  # the most looked at on each side of a cut (a validation error keeps 24)


def mask_cut(text: str, secrets: Iterable[str] = (), *, label: str = MASK) -> str:
    """``text`` with what is left of each secret cut short by its producer replaced by ``label``.

    The beginning of a secret right before a cut mark (``...``, ``…``), the end of one right
    after it: a validation error shows a long value as its first and last characters around
    ``...``, so a secret there is neither whole (`mask_text` misses it) nor gone. A piece of
    at least 3 characters is masked alone; a piece of 1 or 2 only when the other side of the
    same mark holds the other end of the same secret and the two hold 3 characters or more
    together (alone, ``'wo...'`` is too common to be taken for a secret's beginning). For a
    short text (a line about to be shown), after `mask_text`.
    """
    wanted = sorted({s for s in secrets if len(s) > _CUT_SHOWN}, key=lambda s: (-len(s), s))
    pieces = _CUT_MARK.split(text)  # text, mark, text, mark, ..., text
    if not wanted or len(pieces) == 1:
        return text
    for i in range(1, len(pieces), 2):
        before, after = pieces[i - 1], pieces[i + 1]
        for secret in wanted:
            head = _cut_end(secret, before, head=True)
            tail = _cut_end(secret, after, head=False)
            both = head > 0 and tail > 0 and head + tail >= _CUT_SHOWN
            if head >= _CUT_SHOWN or both:
                before = before[:-head] + label
            if tail >= _CUT_SHOWN or both:
                after = label + after[tail:]
        pieces[i - 1], pieces[i + 1] = before, after
    return "".join(pieces)


def _cut_end(secret: str, text: str, *, head: bool) -> int:
    """How many characters of ``secret``'s beginning end ``text`` (``head``; else of its end).

    The most that do, fewer than the whole secret and at most `_CUT_MAX`; 0 for none.
    """
    for n in range(min(len(secret) - 1, len(text), _CUT_MAX), 0, -1):
        if text.endswith(secret[:n]) if head else text.startswith(secret[-n:]):
            return n
    return 0
