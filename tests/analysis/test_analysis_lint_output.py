"""Ruff's output on a hostile module is read capped, while it comes.

Before: ruff ran under `subprocess.run` with its whole output captured, and the output's cap
was checked afterwards: a 4 MiB module of ``import os`` lines made ruff write about 300 MB
of JSON, all of it held in the orchestrator's memory (about 700 MB at its peak) per step,
and the module's facts then said only "ruff failed: exit 1". Now stdout is read at most
the cap, and ruff is stopped there.
"""

from __future__ import annotations

import stat
import sys
import time
from pathlib import Path

import pytest

from clearance.analysis import _lint, lint_source


def test_a_module_that_makes_ruff_write_megabytes_says_so() -> None:
    source = "import os\n" * 100_000  # 1 MB: ruff writes about 80 MB of JSON for it
    result = lint_source("many.py", source)
    assert result.findings == [] and result.total == 0
    assert result.problem is not None and "output is over" in result.problem


def test_reading_stops_at_the_cap_however_long_the_output_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endless = tmp_path / "endless"
    endless.write_text(
        f"#!{sys.executable}\n"
        "import sys, time\n"
        "sys.stdin.read()\n"
        "while True:\n"
        "    sys.stdout.write('x' * 10_000)\n"
        "    sys.stdout.flush()\n"
        "    time.sleep(0.005)\n"
    )
    endless.chmod(endless.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setattr(_lint.sys, "executable", str(endless))
    monkeypatch.setattr(_lint, "_MAX_OUTPUT_BYTES", 64 * 1024)
    monkeypatch.setattr(_lint, "LINT_TIMEOUT_S", 10.0)
    started = time.monotonic()
    result = lint_source("a.py", "x = 1\n")
    assert time.monotonic() - started < 5  # not the whole deadline
    assert result.problem == "ruff's output is over 65,536 bytes: not read"


def test_a_plain_module_is_linted_as_before() -> None:
    result = lint_source("a.py", "import os\n")
    assert result.problem is None
    assert [f["code"] for f in result.findings] == ["F401"]
