"""A module's text as Python reads it: a byte order mark, and characters `str.splitlines` breaks.

Before:
- a UTF-8 file that starts with a byte order mark (valid Python, written so by many Windows
  editors) was "not parsed" (``SyntaxError: invalid non-printable character U+FEFF``): its
  names, imports and complexity were lost, and it had no excerpt to review;
- a form feed, ``\\x1c``-``\\x1e``, NEL, or a line or paragraph separator in a comment or a
  string counts as a line break for `str.splitlines` but not for Python: the module's
  ``lines`` were too many and the excerpt quoted other lines than the function's (the model
  reviewed the wrong code);
- a ``Requires-Python`` of ``>=3.<5,000 digits>`` raised `ValueError` (Python's limit on
  the digits of an integer) in every module's facts step.
"""

from __future__ import annotations

import pytest

from clearance.analysis import module_structure
from clearance.analysis._target import target_from_specifier

FUNCTION = "def f(a):\n    if a:\n        return 1\n    return 2\n"


def test_a_module_starting_with_a_byte_order_mark_is_analysed() -> None:
    facts = module_structure("m.py", '\ufeff"""Does m."""\n' + FUNCTION)
    assert "parse_error" not in facts
    assert facts["purpose"] == "Does m."
    assert facts["most_complex"] == [{"name": "f", "line": 2, "lines": 4, "complexity": 2}]
    assert facts["excerpt"]["text"] == FUNCTION.rstrip("\n")


@pytest.mark.parametrize("breaker", ["\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"])
def test_lines_and_the_excerpt_follow_pythons_line_breaks(breaker: str) -> None:
    source = f"x = 'a{breaker}b'\n# c{breaker}d\n" + FUNCTION
    facts = module_structure("m.py", source)
    assert facts["lines"] == 6
    excerpt = facts["excerpt"]
    assert (excerpt["first_line"], excerpt["last_line"]) == (3, 6)
    assert excerpt["text"] == FUNCTION.rstrip("\n")


def test_crlf_and_lone_cr_are_line_breaks_as_in_python() -> None:
    source = "x = 1\r\ny = 2\r" + FUNCTION.replace("\n", "\r\n")
    facts = module_structure("m.py", source)
    assert facts["lines"] == 6
    assert facts["excerpt"]["text"].splitlines() == FUNCTION.splitlines()


def test_a_requires_python_with_a_huge_minor_version_is_clamped_not_raised() -> None:
    assert target_from_specifier(">=3." + "9" * 5000) == "py313"
    assert target_from_specifier(">=3.8, <3." + "1" * 5000) == "py38"
    assert target_from_specifier(">=3.8") == "py38"


def test_a_sentence_longer_than_any_review_sentence_is_left_out_at_once() -> None:
    """Before: one sentence of a megabyte that states a count was read name by name at each
    of its places (about five seconds per answer, per module of the run), then kept whole."""
    from clearance.analysis import Known, ground
    from clearance.analysis._grounding import MAX_SENTENCE_CHARS
    from cpu_time import cpu_timer

    known = Known.from_facts(
        [{"module": f"m{i}.py", "slug": f"m{i}", "lines": i, "most_complex": []} for i in range(60)]
    )
    text = "The module is fine " * 50_000 + "and has 5 lines. The module m3.py has 3 lines."
    with cpu_timer() as cpu:
        grounded = ground(text, known)
    assert cpu.seconds < 1
    assert grounded.sentences == ["The module m3.py has 3 lines."]
    assert grounded.dropped == {"too long": 1}
    fits = "The module is fine " * ((MAX_SENTENCE_CHARS - 20) // 19) + "and small."
    assert ground(fits, known).sentences == [fits]
