"""Answers are kept whole unless cut off; a cut-off answer loses only its trailing loop."""

import json

import pytest

from clearance._context.answers import REPEAT_MARK, TRUNCATED_MARK, mark_answer, trailing_loop

WHOLE = [
    "def a():\n    return None\n\n\ndef b():\n    return None\n\n\ndef c():\n    return None\n",
    json.dumps([{"id": n} for n in range(5)], indent=2),
    "same\nsame\nsame\nsame",
    "_list" * 60,
    "  padded, with a trailing newline\n\n",
    "",
]


@pytest.mark.parametrize("text", WHOLE)
@pytest.mark.parametrize("finish_reason", ["stop", None, "tool_calls", "content_filter"])
def test_an_answer_the_model_finished_is_kept_byte_for_byte(text, finish_reason):
    marked = mark_answer(text, finish_reason=finish_reason)
    assert marked.text == text and not marked.truncated and not marked.repetitive


def test_a_cut_off_answer_keeps_everything_before_its_trailing_loop():
    head = "def a():\n    return None\n\n\ndef b():\n    return None\n\n\ndef c():\n    return None"
    looping = head + "\n\nThe final answer is:\n- json_encoder" + "_list" * 60
    marked = mark_answer(looping, finish_reason="length")
    assert marked.truncated and marked.repetitive
    assert marked.text == (
        f"{head}\n\nThe final answer is:\n- json_encoder_list\n\n{REPEAT_MARK}\n\n{TRUNCATED_MARK}"
    )


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("Intro.\nsame line\nsame line\nsame line\nsame li", "Intro.\nsame line"),
        ("Steps: " + "do it again and " * 8 + "do i", "Steps: do it again and"),
        ("A table:\n" + "| x | y |\n" * 10, "A table:\n| x | y |"),
    ],
)
def test_a_loop_at_the_cut_off_keeps_one_copy(text, kept):
    marked = mark_answer(text, finish_reason="length")
    assert marked.text == f"{kept}\n\n{REPEAT_MARK}\n\n{TRUNCATED_MARK}"


@pytest.mark.parametrize(
    "text",
    [
        "An answer that ran out of room in the middle of a sent",
        "same\nsame\nsame\nand then it went on to say something else entirely",
        "hahaha",  # too short to be a loop
        "x = [1, 2, 3]\ny = [1, 2, 3]\nz = [4",
    ],
)
def test_a_cut_off_answer_without_a_trailing_loop_is_only_marked(text):
    marked = mark_answer(text, finish_reason="length")
    assert marked.text == f"{text}\n\n{TRUNCATED_MARK}" and not marked.repetitive


def test_a_long_loop_is_found_quickly_and_cut_after_its_first_copy():
    unit = "The quick brown fox jumps over the lazy dog, again and again.\n" * 3
    text = "Start.\n" + unit * 300
    cut = trailing_loop(text)
    assert cut is not None
    assert (
        text[:cut].rstrip()
        == "Start.\nThe quick brown fox jumps over the lazy dog, again and again."
    )
    assert trailing_loop("no loop here at all, just text") is None
