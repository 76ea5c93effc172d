"""`clearance run` prints a bounded part of a long synthesis and says where the rest is."""

from __future__ import annotations

import pytest

from clearance import RunResult
from clearance.cli import _run_output
from cpu_time import cpu_timer


def test_a_long_synthesis_is_cut_with_where_the_whole_text_is(
    capsys: pytest.CaptureFixture[str],
) -> None:
    text = "x" * 4_000_000  # a few seconds of panel layout if printed whole
    result = RunResult(run_id="run_1", status="completed", synthesis=text)
    with cpu_timer() as cpu:
        _run_output.print_run(result)
    printed = capsys.readouterr().out
    shown = _run_output.MAX_PRINTED_CHARS
    assert printed.count("x") == shown
    flat = " ".join(printed.replace("│", " ").split())
    assert f"cut at {shown:,} of 4,000,000 characters; all: clearance inspect run_1 --task" in flat
    assert cpu.seconds < 2.0


def test_a_short_synthesis_is_printed_whole(capsys: pytest.CaptureFixture[str]) -> None:
    _run_output.print_run(RunResult(run_id="run_1", status="completed", synthesis="z" * 500))
    printed = capsys.readouterr().out
    assert printed.count("z") == 500
    assert "cut at" not in printed
