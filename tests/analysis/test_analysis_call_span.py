"""A call with arguments in a sentence (``bool("")``) is found in linear time, as before.

Before: the expression ``\\b[A-Za-z_]\\w*\\([^)\\s][^)]*\\)``, searched, read the rest of the
text from each open call without its ``)``: ``x(y x(y x(y ...`` took 0.75 s of CPU for a
sentence of 68,000 characters, 12 times longer for 4 times the text. `_call_span` finds the
same first match (the same span) by reading the text once.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance.analysis import Known, _grounding
from clearance.analysis._grounding import _call_span, sentence_problem
from cpu_time import cpu_seconds

FORMER = re.compile(r"\b[A-Za-z_]\w*\([^)\s][^)]*\)")
"""The former expression: quadratic on open calls."""


def former(text: str) -> tuple[int, int] | None:
    found = FORMER.search(text)
    return None if found is None else found.span()


CORPUS = [
    'The check calls bool("") to test it.',
    "The function load(path) reads the file.",
    "Call f() with no arguments, then g(x).",
    "It uses x( y) and then stops.",
    "See section (a) of the notes.",
    "The value 3(x) is a number, not a call.",
    "An é(x) call and a _private(y) one.",
    "Nested outer(inner(x)) calls.",
    "Open call f(x and never closed.",
    "Open f(x then another g(y) closed.",
    "word(\nnext) across a line.",
    "word(\tx) after a tab.",
    "a.b(c) is a method call.",
    "x2(y) and 2x(y) differ.",
    "naïve(x) starts with an ASCII letter.",
    "ünicode(x) does not.",
    "Empty f( ) has a space.",
    "Two calls: first(a) and second(b).",
    "f(a)) extra bracket.",
    "Parenthetical remark (like this) only.",
    "The module sub/mod1.py has 101 lines.",
    "",
    "(",
    "f(",
    "f(x",
    "f(x)",
    ")f(x)(",
]


@pytest.mark.parametrize("text", CORPUS)
def test_the_same_call_is_found_as_by_the_former_expression(text: str) -> None:
    assert _call_span(text) == former(text)


PIECES = ["x", "_", "é", "1", "(", ")", " ", "\n", "\t", "a(", "f(x)", "`", ".", "'", "Ab"]


@given(st.lists(st.sampled_from(PIECES), max_size=16))
def test_the_span_is_the_former_expressions_on_any_text(pieces: list[str]) -> None:
    text = "".join(pieces)
    assert _call_span(text) == former(text)


@given(st.text(max_size=40))
def test_the_span_is_the_former_expressions_on_any_characters(text: str) -> None:
    assert _call_span(text) == former(text)


def best_cpu(sentence: str, known: Known) -> float:
    return min(cpu_seconds(sentence_problem, sentence, known) for _ in range(3))


@pytest.mark.parametrize("piece", ["x(y ", "f(", "a_b(c\n", "x(y) (z "])
def test_checking_open_calls_grows_linearly_with_the_sentence(
    piece: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """8 times the text costs about 8 times the CPU time (the former: about 64 times)."""
    monkeypatch.setattr(_grounding, "MAX_SENTENCE_CHARS", 10**9)  # the checks themselves
    known = Known.from_facts([])
    n = 4_000
    small = best_cpu(f"Module a {piece * n}.", known)
    large = best_cpu(f"Module a {piece * (8 * n)}.", known)
    assert large < 0.5, large
    assert large < 24 * max(small, 0.002), (small, large)
