"""Compaction and offloading limits from outside: integers, or a one-line `ConfigError`."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from clearance import ConfigError
from clearance.subagents import DataOffloader, StepCompactor, Workspace

NOT_COUNTS = [math.nan, math.inf, 2.5, True, "3", None, 0, -1]


@pytest.mark.parametrize("name", ["keep_recent", "max_step_chars", "line_chars"])
@pytest.mark.parametrize("value", NOT_COUNTS)
def test_step_compactor_limits_are_positive_integers(name, value):
    # NaN passed (min() of it and the others was NaN, never below 1); compacting then
    # failed with a TypeError on the first history long enough.
    with pytest.raises(ConfigError, match=name):
        StepCompactor(**{name: value})


@pytest.mark.parametrize("name", ["max_chars", "max_lines", "preview_lines", "preview_chars"])
@pytest.mark.parametrize("value", NOT_COUNTS)
def test_offload_thresholds_are_positive_integers(tmp_path: Path, name, value):
    with pytest.raises(ConfigError, match=name):
        DataOffloader(Workspace(tmp_path / "a"), **{name: value})


def test_a_compacted_failure_line_keeps_its_bound():
    # A line limit below the ellipsis cut from the wrong end (a negative slice).
    with pytest.raises(ConfigError, match="line_chars"):
        StepCompactor(line_chars=2)
