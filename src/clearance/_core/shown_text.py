r"""Text from outside as a file or page a person reads may hold it: controls as escapes.

Model answers, goals, titles and input files' text reach files and pages people open with
``cat``, a pager, an editor or a browser: the run report (``--output``) and the run page
(``clearance view``, ``serve``). Raw, an escape sequence there sets a terminal's clipboard or
title or clears its screen, a carriage return writes over the line it ends, and a
bidirectional override shows text in another order than it reads. `shown` writes each as
its visible escape (ESC as ``\x1b``), as the terminal's output does, and changes no
printable character; the text as sent stays in the ledger.
"""

from __future__ import annotations

import re

__all__ = ["escaped_count", "shown"]

# C0 controls but tab and newline, DEL, C1 controls, and the bidirectional overrides and
# isolates: what the terminal's output escapes too.
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_ESCAPES = {
    code: chr(code).encode("unicode_escape").decode("ascii")
    for code in (
        *range(0x00, 0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0),
        *range(0x202A, 0x202F), *range(0x2066, 0x206A),
    )
}  # fmt: skip


def shown(text: str) -> str:
    r"""``text`` with each control character and bidirectional override as its escape.

    Each C0/C1 control character (tab and newline kept), DEL and each bidirectional override
    or isolate becomes its escape as Python writes it (``\x1b``, ``\u202e``); a Windows line
    break (CRLF) is a line break. No printable character changes.
    """
    text = text.replace("\r\n", "\n")
    # One pass of str.translate: linear in the text, whatever it holds.
    return text.translate(_ESCAPES) if _UNSHOWN.search(text) else text


def escaped_count(text: str | None) -> int:
    """How many characters of ``text`` `shown` writes as escapes (``None``: none)."""
    return len(_UNSHOWN.findall(text.replace("\r\n", "\n"))) if text else 0
