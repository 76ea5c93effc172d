"""Grounding costs time in proportion to the model's text, not to the text times the package.

Before: each sentence stating a count ran one regular expression per name the package has
(module paths, slugs, function names), compiled again and again past `re`'s cache of 512:
a coordinator's answer of 100,000 characters about a 300-module package took about 160
seconds to check, with the command hanging after the run. The names are now looked up by
place and length, with the same result as the regular expressions.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clearance.analysis import Known, _grounding, ground
from clearance.analysis._grounding import _named, sentence_problem
from cpu_time import cpu_timer


def package(modules: int) -> list[dict[str, object]]:
    return [
        {
            "module": f"sub/mod{m}.py",
            "slug": f"sub.mod{m}",
            "lines": 100 + m,
            "functions": 5,
            "public_count": 3,
            "findings_total": 1,
            "most_complex": [
                {"name": f"Cls{m}.func_{i}", "line": i + 1, "lines": 10, "complexity": 3}
                for i in range(6)
            ],
        }
        for m in range(modules)
    ]


def test_a_long_answer_about_a_large_package_is_checked_in_a_second_or_two() -> None:
    known = Known.from_facts(package(300))
    text = " ".join(f"The module mod{i % 300} has {i} lines." for i in range(3000))
    assert len(text) > 90_000
    with cpu_timer() as cpu:
        grounded = ground(text, known)
    assert cpu.seconds < 3
    assert grounded.dropped["number"] + len(grounded.sentences) == 3000


def reference(sentence: str, known: Known) -> set[str]:
    """The names the former check found: one regular expression per name."""
    return {
        name for name in known.numbers
        if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", sentence)
    }  # fmt: skip


KNOWN = Known.from_facts(package(3))
PIECES = [*sorted(KNOWN.numbers), " ", ".", "_", "x", "é", "(", "/", "-", "1", "`"]


@given(st.lists(st.sampled_from(PIECES), max_size=12))
def test_the_names_found_are_those_the_regular_expressions_found(pieces: list[str]) -> None:
    sentence = "".join(pieces)
    assert set(_named(sentence, KNOWN)) == reference(sentence, KNOWN)


def test_a_sentence_naming_a_module_may_state_only_its_counts() -> None:
    known = Known.from_facts(package(2))
    assert ground("The module sub/mod1.py has 101 lines.", known).sentences
    assert not ground("The module sub/mod1.py has 100 lines.", known).sentences
    assert ground("Some module has 100 lines.", known).sentences  # named nothing: any count


FILE = re.compile(r"[\w/.-]*\w\.py\b")
"""The file names' former expression: quadratic when searched on a long run."""


@given(st.lists(st.sampled_from(["a", "_", ".", "/", "-", "py", ".py", " ", "é", "x.py", "("])))
def test_the_files_found_are_those_the_former_expression_found(pieces: list[str]) -> None:
    from clearance.analysis._grounding import _file_spans

    text = "".join(pieces)
    assert _file_spans(text) == [m.span() for m in FILE.finditer(text)]


@pytest.mark.parametrize(
    "sentence",
    [
        "Module a is fine" + "." * 70_000,
        "Module a " + "a." * 35_000 + ".",
        "Module a " + "a/" * 35_000 + ".",
        "Module a " + "x(y " * 17_000 + ".",
        "Module a " + "https:// " * 7_000 + ".",
    ],
    ids=["dots", "dotted", "slashes", "open calls", "schemes"],
)
def test_one_long_sentence_of_path_characters_is_checked_at_once(
    sentence: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: a line of 70,000 dots, or ``a.a.a...``, took about two minutes (the file
    name expression, searched from each place in a run, read the rest of the run each
    time). The length cap (`MAX_SENTENCE_CHARS`) now leaves such a sentence out before any
    check; lifted here, so that the checks themselves are still shown linear."""
    monkeypatch.setattr(_grounding, "MAX_SENTENCE_CHARS", 10**9)
    assert sentence_problem(sentence, Known.from_facts(package(1))) != "too long"
    known = Known.from_facts(package(1))
    with cpu_timer() as cpu:
        ground(sentence, known)
    assert cpu.seconds < 2
