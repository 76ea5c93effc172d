"""A user tool that raises what no tool should is one bounded, labelled tool error.

Before: a function tool (plain or ``async``) raising `SystemExit` (a library calling
``sys.exit``) stopped the whole run, and one raising `asyncio.CancelledError` cancelled it:
every other task's result was lost with it. (A `KeyboardInterrupt` is taken for the person's
Ctrl-C: the run stops, left interrupted and resumable; see `test_library_misuse`.) One
raising `GeneratorExit` or a bare `BaseException`, an exception whose ``__str__`` raises, or
one whose message holds a lone surrogate failed its task with a raw Python error that named
no tool, and the tool call was never recorded (its ``tool_started`` event without a record
tells a resume the call may have run). A plain tool raising `StopIteration` could not be set
on the awaited future: a traceback on stderr, and the task waited the tool's whole deadline.
An exception's message reached the model and the ledger whole, 5 MB of it.
"""

from __future__ import annotations

import asyncio
import re
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from clearance import Agent, Orchestrator, RunLedger, RunOptions, Task, Team
from clearance._core.reasons import MAX_FAILURE_CHARS
from clearance.cli._app import app
from clearance.models._base import ToolCall
from clearance.testing import FunctionModel


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


HUGE = "\x1b]0;owned\x07" + "A" * 5_000_000

# name -> (what the tool raises, what the model must be told)
ODD: dict[str, tuple[BaseException, str]] = {
    "exit": (SystemExit(3), "error: the tool 'odd' raised SystemExit: 3"),
    "generator_exit": (GeneratorExit(), "error: the tool 'odd' raised GeneratorExit"),
    "base": (BaseException("base"), "error: the tool 'odd' raised BaseException: base"),
    "cancelled": (asyncio.CancelledError(), "error: the tool 'odd' raised CancelledError"),
    "unprintable": (
        Unprintable(),
        "error: the tool 'odd' raised Unprintable (its message cannot be shown)",
    ),
    "surrogate": (ValueError("half \ud800 a character"), "error: half ? a character"),
    "empty": (ValueError(), "error: the tool 'odd' raised ValueError"),
}


def odd_tool(exc: BaseException, *, asynchronous: bool) -> Any:
    if asynchronous:

        async def odd(x: int) -> str:
            """Fail oddly."""
            raise exc

        return odd

    def odd_plain(x: int) -> str:
        """Fail oddly."""
        raise exc

    odd_plain.__name__ = "odd"
    return odd_plain


def prompt_text(request: Any) -> str:
    return "\n".join(m.content or "" for m in request.prompt.messages)


async def run_odd(tmp_path: Path, tool: Any) -> tuple[Any, list[Any], list[str]]:
    """Task t calls the tool once, then answers; task u never calls it."""
    seen: list[str] = []

    def answer(request: Any) -> Any:
        if request.prompt.manifest.subject != "task:t":
            return "done"
        if not seen:
            seen.append("")
            return ToolCall(id="c1", name="odd", arguments={"x": 1})
        seen.append(prompt_text(request))
        return "done"

    team = Team(agents=(Agent(name="a", instructions="x", tools=("odd",)),))
    tasks = [Task(id=i, title=i, description="d", assignee="a") for i in ("t", "u")]
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        orchestrator = Orchestrator(team, model=FunctionModel(answer), ledger=ledger,
                                    tools={"odd": tool},
                                    options=RunOptions(workspace_root=tmp_path / "ws"))  # fmt: skip
        result = await orchestrator.run_tasks(tasks)
        calls = ledger.tool_calls(result.run_id)
        recorded = {t.task_id: t.status for t in ledger.tasks(result.run_id)}
    assert recorded == {"t": "completed", "u": "completed"}  # nothing finished is lost
    return result, calls, seen[1:]


@pytest.mark.parametrize("asynchronous", [False, True], ids=["plain", "async"])
@pytest.mark.parametrize("name", sorted(ODD))
async def test_an_odd_exception_is_a_tool_error_and_the_run_goes_on(
    name: str, asynchronous: bool, tmp_path: Path
) -> None:
    exc, expected = ODD[name]
    result, calls, prompts = await run_odd(tmp_path, odd_tool(exc, asynchronous=asynchronous))
    assert {t: str(o.status) for t, o in result.tasks.items()} == {"t": "completed",
                                                                  "u": "completed"}  # fmt: skip
    (call,) = calls
    assert call.is_error and call.result == expected  # recorded, labelled, one line
    (second,) = prompts
    assert expected in second  # what the model received next


async def test_a_plain_tool_raising_stop_iteration_fails_at_once(tmp_path: Path) -> None:
    """Not after its 60 s deadline: the exception is handed back, not set on the future."""

    def odd(x: int) -> str:
        """Stop."""
        raise StopIteration("done")

    started = time.monotonic()
    _, calls, _ = await run_odd(tmp_path, odd)
    assert time.monotonic() - started < 10
    (call,) = calls
    assert call.result == "error: done"


@pytest.mark.parametrize("asynchronous", [False, True], ids=["plain", "async"])
async def test_a_huge_error_message_is_cut_before_the_model_or_ledger_sees_it(
    asynchronous: bool, tmp_path: Path
) -> None:
    _, calls, prompts = await run_odd(tmp_path, odd_tool(ValueError(HUGE),
                                                         asynchronous=asynchronous))  # fmt: skip
    (call,) = calls
    assert call.is_error and len(call.result) <= MAX_FAILURE_CHARS + 60
    assert call.result.endswith(f"[cut: {len('error: ' + HUGE)} characters]")
    (second,) = prompts
    assert len(second) < 10_000 and call.result in second


async def test_a_returned_str_subclass_is_plain_text(tmp_path: Path) -> None:
    """A subclass whose methods lie (``len``, ``splitlines``) cannot hide a long output."""

    class Liar(str):
        def __len__(self) -> int:
            return 1

        def splitlines(self, keepends: bool = False) -> list[str]:
            return ["x"]

    def odd(x: int) -> str:
        """Lie."""
        return Liar("line\n" * 5000)

    _, calls, prompts = await run_odd(tmp_path, odd)
    (call,) = calls
    assert not call.is_error and type(call.result) is str
    assert "[odd: 25000 chars, 5000 lines;" in call.result  # offloaded, as any long output
    assert len(prompts[0]) < 10_000


EXIT_TOOLS = '''\
import sys


def leave(x: int) -> str:
    """A library that calls sys.exit."""
    sys.exit("bye from the tool")
'''

EXIT_TEAM = """\
name: leaving
agents:
  - {name: a, instructions: "You work.", tools: [leave]}
tools:
  leave: "leaving_tools_mod:leave"
tasks:
  - {id: t, title: T, description: Do it., assignee: a}
  - {id: u, title: U, description: Do that., assignee: a}
"""


@pytest.mark.network
def test_a_team_file_tool_calling_sys_exit_leaves_the_run_going(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """End to end: ``clearance run`` with a real model server; the model hears the error."""
    (tmp_path / "leaving_tools_mod.py").write_text(EXIT_TOOLS)
    (tmp_path / "team.yaml").write_text(EXIT_TEAM)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "leaving_tools_mod", raising=False)

    def reply(messages: list[dict[str, Any]]) -> Any:
        text = "\n".join(m["content"] or "" for m in messages)
        if "raised SystemExit: bye from the tool" in text:  # what the model received
            return "the tool left"
        if "Do it." in text:
            return [("leave", {"x": 1})]
        return "fine"

    monkeypatch.setenv("OPENAI_BASE_URL", openai_server(reply))
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    out = CliRunner().invoke(app, ["run", "team.yaml", "--model", "openai:m", "--db", db])
    assert out.exit_code == 0, out.output
    match = re.search(r"run id: (\S+)", out.output)
    assert match is not None, out.output
    with RunLedger(db) as ledger:
        (call,) = ledger.tool_calls(match.group(1))
        tasks = {t.task_id: (t.status, t.result) for t in ledger.tasks(match.group(1))}
    assert call.is_error
    assert call.result == "error: the tool 'leave' raised SystemExit: bye from the tool"
    assert tasks == {"t": ("completed", "the tool left"), "u": ("completed", "fine")}


IMPORT_TEAM = """\
name: imports
agents:
  - {name: a, instructions: "You work.", tools: [go]}
tools:
  go: "%s:go"
tasks:
  - {id: t, title: T, description: Do it., assignee: a}
"""

UNPRINTABLE_IMPORT = """\
class Odd(Exception):
    def __str__(self):
        raise RuntimeError("no message")


raise Odd()
"""

# module source -> what the one error line says after "tools.go: cannot import '<module>': "
BAD_IMPORTS = {
    "huge": ("raise ValueError('\\x1b[2J' + 'B' * 100_000)", "ValueError: \\x1b[2JBBB"),
    "unprintable": (UNPRINTABLE_IMPORT, "Odd (its message cannot be shown)"),
    "interrupt": ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    "slow": ("import time\ntime.sleep(8)\n\ndef go(x: int) -> str:\n    return 'late'\n",
             "its import did not finish within 0.5 s"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD_IMPORTS))
def test_a_tool_module_that_fails_or_hangs_at_import_is_one_bounded_line_exit_2(
    case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: an import's 100 KB message was the error line whole; an unprintable
    exception, a traceback; `KeyboardInterrupt`, exit 130 as if the person pressed Ctrl-C;
    a module that sleeps at import held ``clearance run`` for as long (no deadline)."""
    import clearance._core.user_modules as user_modules

    source, expected = BAD_IMPORTS[case]
    module = f"bad_import_{case}_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(source)
    (tmp_path / "team.yaml").write_text(IMPORT_TEAM % module)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(user_modules, "IMPORT_TIMEOUT_S", 0.5)
    started = time.monotonic()
    out = CliRunner().invoke(app, ["run", "team.yaml", "--model", "fake:x",
                                   "--db", f"sqlite:///{tmp_path / 'r.db'}"])  # fmt: skip
    assert time.monotonic() - started < 5
    assert out.exit_code == 2, out.output
    (line,) = out.output.strip().splitlines()
    assert line.startswith(f"error: team.yaml: tools.go: cannot import {module!r}: {expected}")
    assert len(line) < MAX_FAILURE_CHARS + 200
