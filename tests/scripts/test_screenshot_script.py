"""``scripts/screenshot.py``: the README's picture comes from the command its caption names.

The caption's command is the one the script runs, and that run (through the real command line,
on the fake model) records a completed run whose page selects the pictured task. Taking the
picture itself needs headless Chromium (marked ``browser``).
"""

from __future__ import annotations

import importlib.util
import re
import shlex
import shutil
import struct
from pathlib import Path
from types import ModuleType

import pytest

from clearance import RunLedger

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("screenshot", ROOT / "scripts" / "screenshot.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def caption() -> str:
    """The README's paragraph under the run page's picture."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    after = readme.split("(docs/img/run-view.png)", 1)[1]
    return " ".join(after.strip().split("\n\n", 1)[0].split())


def test_the_caption_names_the_command_and_task_the_script_uses() -> None:
    script = load_script()
    commands = re.findall(r"`(clearance run [^`]+)`", caption())
    assert [tuple(shlex.split(c)) for c in commands] == [script.COMMAND]
    assert f"Selected: `{script.SELECTED}`" in caption()
    assert script.OUTPUT == ROOT / "docs" / "img" / "run-view.png"


def test_the_scripts_run_records_a_completed_run_with_the_pictured_task(tmp_path) -> None:
    script = load_script()
    db, run_id, page = script.record_run(tmp_path)
    with RunLedger(db) as ledger:
        assert ledger.get_run(run_id).status == "completed"
        tasks = {t.task_id: t.status for t in ledger.tasks(run_id)}
    assert tasks[script.SELECTED] == "completed"
    fragment = script.task_fragment(db, run_id, script.SELECTED)
    assert re.fullmatch(r"#task-\d+", fragment)
    html = page.read_text(encoding="utf-8")
    assert f'id="{fragment[1:]}"' in html and script.SELECTED in html
    with pytest.raises(RuntimeError, match="no task 'nope'"):
        script.task_fragment(db, run_id, "nope")


@pytest.mark.browser
def test_the_script_saves_the_picture(tmp_path) -> None:
    if not (shutil.which("chromium") and shutil.which("chromedriver")):
        pytest.skip("headless Chromium is not installed")
    pytest.importorskip("selenium")
    script = load_script()
    output = tmp_path / "shot.png"
    assert script.main(["--output", str(output)]) == 0
    header = output.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", header[16:24]) == script.VIEWPORT
