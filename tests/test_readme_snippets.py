"""The README's streaming snippet runs as written (with the deterministic fake model)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import clearance

README = Path(__file__).parents[1] / "README.md"


def snippet(section: str) -> str:
    text = README.read_text(encoding="utf-8")
    body = text.split(f"## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", body, re.DOTALL).group(1)


def test_the_streaming_snippet_prints_text_as_it_streams(tmp_path: Path) -> None:
    code = snippet("Streaming").replace("llama-cpp:smollm2", "fake:readme")
    assert "fake:readme" in code
    source = str(Path(clearance.__file__).parents[1])  # this checkout's clearance
    env = {**os.environ, "PYTHONPATH": source}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[1] == "[task_started intro ]"
    assert lines[2].startswith("readme result for Intro:")
    assert lines[3] == "[task_completed intro ]"
    assert lines[-1].startswith("synthesis: readme result for Goal:")
    assert (tmp_path / ".clearance" / "runs.db").exists()
