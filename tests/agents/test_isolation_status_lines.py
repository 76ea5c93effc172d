"""Reading a subagent's ``STATUS:`` line, and a ``FILE:`` request, in time linear in the answer.

The status line was matched with ``^\\W*status\\W*[:=]?\\s*([a-z_ ]+?)\\W*$``: its runs of
non-word characters, spaces and lazy words overlap, so a line such as ``STATUS`` followed by
400 spaces and a digit took seconds (time to the fourth power of its length) in the
orchestrator, and again in ``clearance verify`` (the legacy form). A ``FILE:`` request was
matched with a lazy group and a non-word run that crossed lines: quadratic.
"""

import random
import re

import pytest

from clearance._context.isolated import (
    _FILE_REQUEST,
    STATUSES,
    parse_status,
    status_word,
    subagent_result,
)
from clearance._context.verify_results import _legacy_subagent_result
from cpu_time import cpu_seconds

_OLD_STATUS = re.compile(r"^\W*status\W*[:=]?\s*([a-z_ ]+?)\W*$", re.IGNORECASE)
_OLD_FILE = re.compile(r"^\W*file\W*:\s*(\S.*?)\s*$", re.IGNORECASE | re.MULTILINE)


def _old_word(line: str) -> str:
    match = _OLD_STATUS.match(line)
    return match.group(1).strip().lower().replace(" ", "_") if match else ""


@pytest.mark.parametrize(
    "line",
    [
        "STATUS" + " " * 300 + "1",  # seconds before
        "STATUS:" + " " * 300 + "done 1",
        "STATUS: " + "a " * 20_000 + "1",
        "**" * 20_000 + "STATUS" + " =" * 20_000 + "é",
        "status:" + " done" * 20_000,
    ],
)
def test_a_hostile_status_line_is_read_in_linear_time(line) -> None:
    answer = f"Body.\n{line}\n"
    assert cpu_seconds(parse_status, answer) < 0.5
    assert cpu_seconds(_legacy_subagent_result, answer) < 0.5


def test_many_hostile_lines_without_a_status_are_read_in_linear_time() -> None:
    answer = ("STATUS" + " " * 50 + "1\n") * 2_000
    assert cpu_seconds(parse_status, answer) < 0.5
    assert parse_status(answer)[0] == "done_with_concerns"


@pytest.mark.parametrize(
    ("line", "word"),
    [
        ("STATUS: done", "done"),
        ("**Status:** DONE_WITH_CONCERNS", "done_with_concerns"),
        ("status = needs context", "needs_context"),
        ("- STATUS: blocked.", "blocked"),
        ("STATUSdone", "done"),
        ("STATUSES: done", ""),
        ("STATUS: done-ish", ""),
        ("STATUS: 1", ""),
        ("Status of the build: green", ""),
        ("STATUS:   ", ""),
    ],
)
def test_status_word(line: str, word: str) -> None:
    assert status_word(line) == word == _old_word(line)


def test_status_word_reads_every_line_as_the_old_expression_did() -> None:
    pieces = ["status", "STATUS", "Status", " ", ":", "=", "*", "done", "_", "with",
              "concerns", "-", "1", "é", "\u2028", "\x0c", "\t", "\u017f", "a", "DONE",
              "needs context", "\u00a0", "!"]  # fmt: skip
    rng = random.Random(7)
    for _ in range(20_000):
        line = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 7)))
        assert status_word(line) == _old_word(line), line
    assert set(STATUSES) <= {status_word(f"STATUS: {s}") for s in STATUSES}


@pytest.mark.parametrize(
    "question",
    ["-\n" * 20_000 + "x", "FILE: a" + " " * 40_000 + "b", "file" + "\n-" * 20_000],
)
def test_a_file_request_is_read_in_linear_time(question: str) -> None:
    assert cpu_seconds(_FILE_REQUEST.search, question) < 0.5


def test_file_requests_are_read_as_before() -> None:
    pieces = ["file", "FILE", " ", ":", "\n", "a.py", "-", "*", "\t", "x", "\r", "`", "é",
              "\u2028", "QUESTION", "1"]  # fmt: skip
    rng = random.Random(11)

    def path(pattern: re.Pattern[str], question: str) -> str | None:
        match = pattern.search(question)
        return None if match is None else match.group(1).strip().strip("'\"`")

    for _ in range(20_000):
        question = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 8)))
        assert path(_FILE_REQUEST, question) == path(_OLD_FILE, question), question
    assert path(_FILE_REQUEST, "I need it.\nFILE:\n  src/a.py  \n") == "src/a.py"


def test_a_huge_answer_is_split_in_linear_time() -> None:
    body = "line of the answer\r\n" * 200_000
    answer = f"{body}STATUS: done\r\n"
    assert cpu_seconds(subagent_result, answer) < 2.0
    assert subagent_result(answer) == body.rstrip()
