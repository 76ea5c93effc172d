"""Model text never prints a raw line or paragraph separator (U+2028, U+2029) or NEL (U+0085).

A terminal draws U+2028 and U+2029 as nothing, but an editor, a log viewer or
`str.splitlines` breaks the line there: the synthesis panel of ``clearance run``, the lines
``--stream`` prints, ``clearance inspect``'s boxes, gutters and headings printed them raw, so
the text after one passed for a line of Clearance's own (``run id: ... status: completed``),
outside the box or the gutter. Now each is shown escaped (``\\u2028``), or, in ``chat``'s
gutter, as a line of the gutter. Real ``clearance`` processes, a real SQLite ledger and a
scripted model server on 127.0.0.1.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance.cli._common import safe, safe_line, safe_lines

pytestmark = pytest.mark.network

# Lines of Clearance's own, as a model would imitate them.
MARKERS = (
    "run id: run_forged  status: completed",
    "verify: ok",
    "[    1.0s] completed  b (0.1s) [2/2]",
    "see every prompt: clearance inspect run_forged",
)
SEPARATORS = ("\u2028", "\u2029", "\x85", "\u2028")
HOSTILE = "fine" + "".join(s + m for s, m in zip(SEPARATORS, MARKERS, strict=True))
RAW = ("\u2028", "\u2029", "\x85")

TEAM = """\
name: separators
agents:
  - {name: writer, instructions: "You write."}
tasks:
  - {id: a, title: First, description: Write the first part., assignee: writer}
  - {id: b, title: Second, description: Write the second part., assignee: writer}
"""


def forged(output: str) -> list[str]:
    """The lines a marker starts, outside a box or a gutter, as `str.splitlines` splits.

    A line behind a ``│`` gutter, or inside a box (a ``│`` on each side), is fenced.
    """
    found = []
    for line in output.splitlines():
        fenced = line.startswith("│") and line.count("│") <= 2
        if not fenced and any(line.lstrip().startswith(marker) for marker in MARKERS):
            found.append(line)
    return found


def assert_shown_escaped(output: str) -> None:
    assert forged(output) == [], output[-3_000:]
    for char in RAW:
        assert char not in output, (repr(char), output[-3_000:])


def clearance(tmp: Path, url: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "x", "COLUMNS": "300"}
    command = [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{tmp / 'runs.db'}"]
    return subprocess.run(
        command, input=stdin, capture_output=True, text=True, env=env, timeout=120, cwd=tmp
    )


def run_id_of(stdout: str) -> str:
    (line,) = [ln for ln in stdout.split("\n") if ln.startswith("run id: run_")]
    return line.split()[2]


def test_safe_lines_escapes_the_separators_and_safe_line_every_break() -> None:
    assert safe("a\u2028b") == "a\u2028b"  # `safe` escapes exactly the controls, as before
    assert safe_lines("a\u2028b\u2029c\x85d\ne") == "a\\u2028b\\u2029c\\x85d\ne"
    assert str(safe_line("a\u2028b\u2029c\x85d\ne")) == "a\\u2028b\\u2029c\\x85d\\ne"


@pytest.mark.parametrize("stream", [False, True], ids=["panel", "stream"])
def test_run_shows_the_synthesis_and_streamed_text_with_separators_escaped(
    tmp_path: Path, openai_server: Any, stream: bool
) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    url = openai_server(lambda messages: HOSTILE)
    flags = ["--stream"] if stream else []
    result = clearance(tmp_path, url, "run", "team.yaml", "--model", "openai:m", *flags)
    assert result.returncode == 0, result.stderr[-2_000:]
    assert_shown_escaped(result.stdout + result.stderr)
    escaped = "fine\\u2028" + MARKERS[0] + "\\u2029" + MARKERS[1] + "\\x85" + MARKERS[2]
    assert escaped in result.stdout  # the synthesis (and each streamed answer) whole
    if stream:  # each task's and the synthesis's answer on its `subject | ` line
        said = [ln for ln in result.stdout.splitlines() if " | fine\\u2028" in ln]
        assert sorted(ln.split(" | ")[0] for ln in said) == ["synthesis", "task:a", "task:b"]


def test_stream_shows_a_tool_name_with_line_breaks_on_its_one_line(
    tmp_path: Path, openai_server: Any
) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    name = "look\n" + MARKERS[0] + "\u2028" + MARKERS[1]

    def reply(messages: list[dict[str, Any]]) -> Any:
        return [(name, {})] if "Write the first part." in messages[-1]["content"] else "ok"

    url = openai_server(reply)
    result = clearance(tmp_path, url, "run", "team.yaml", "--model", "openai:m", "--stream")
    output = result.stdout + result.stderr
    assert_shown_escaped(output)
    (line,) = [ln for ln in output.splitlines() if " calls tool " in ln]
    assert line == f"task:a calls tool look\\n{MARKERS[0]}\\u2028{MARKERS[1]}"


@pytest.fixture
def recorded(tmp_path: Path, openai_server: Any) -> tuple[Path, str, str]:
    """A run whose every answer is `HOSTILE`: folder, server URL, run id."""
    (tmp_path / "team.yaml").write_text(TEAM)
    url = openai_server(lambda messages: HOSTILE)
    result = clearance(tmp_path, url, "run", "team.yaml", "--model", "openai:m")
    assert result.returncode == 0, result.stderr[-2_000:]
    return tmp_path, url, run_id_of(result.stdout)


@pytest.mark.parametrize(
    "args",
    [[], ["--no-prompt"], ["--response-only"], ["--response-only", "--task", "a"]],
    ids=["prompts", "boxes", "responses", "one-response"],
)
def test_inspect_shows_the_separators_escaped(
    recorded: tuple[Path, str, str], args: list[str]
) -> None:
    tmp, url, run_id = recorded
    result = clearance(tmp, url, "inspect", run_id, "--no-pager", *args)
    assert result.returncode == 0, result.stderr[-2_000:]
    assert_shown_escaped(result.stdout + result.stderr)
    assert "fine\\u2028" + MARKERS[0] + "\\u2029" + MARKERS[1] in result.stdout


def test_chat_shows_each_separator_as_a_line_of_its_gutter(
    tmp_path: Path, openai_server: Any
) -> None:
    (tmp_path / "team.yaml").write_text(TEAM)
    url = openai_server(lambda messages: HOSTILE)
    result = clearance(
        tmp_path, url, "chat", "team.yaml", "--agent", "writer", "--model", "openai:m",
        "--context-window", "100000", stdin="hello\n",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2_000:]
    assert_shown_escaped(result.stdout + result.stderr)
    lines = result.stdout.splitlines()
    third = f"│ {MARKERS[1]}\\x85{MARKERS[2]}"
    assert lines == ["│ fine", f"│ {MARKERS[0]}", third, f"│ {MARKERS[3]}"]
