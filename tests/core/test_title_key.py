"""`title_key`: its fast path for ASCII titles gives what the full rule gives."""

from __future__ import annotations

import unicodedata

from clearance._core.names import title_key


def full_rule(title: str) -> str:
    shown = unicodedata.normalize("NFKC", title)
    return "".join(c for c in shown if unicodedata.category(c) != "Cf").casefold()


def test_ascii_titles_take_the_fast_path_to_the_same_key() -> None:
    for code in range(128):
        title = f"Report {chr(code)} ẞ" if code % 2 else f"Report {chr(code)}X"
        assert title_key(title) == full_rule(title), repr(title)
        ascii_title = f"Re{chr(code)}PORT"
        assert title_key(ascii_title) == full_rule(ascii_title), repr(ascii_title)


def test_titles_that_read_alike_share_a_key() -> None:
    assert title_key("Café") == title_key("Cafe\u0301") == title_key("CAFÉ")
    full_width = "\uff32\uff45\uff50\uff4f\uff52\uff54"  # "Report" in full-width letters
    assert title_key("Re\u200bport") == title_key("report") == title_key(full_width)
    assert title_key("Report A") != title_key("Report B")
