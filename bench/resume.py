"""Case: the cost of a resume is the unanswered steps only.

A 20-step tool loop (19 calls of a file-appending tool, then the answer) runs three ways on
one `FunctionModel` script: uninterrupted; in a child process SIGKILLed by the model's 15th
request (after the request was recorded, before it is answered); then resumed with
``Orchestrator.resume``. The model requests and prompt tokens of each session are counted
where they are answered (the model), and the tool's side effects in its file.
``python -m bench.resume`` prints one line per session and one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from clearance import Agent, AgentLimits, Orchestrator, RunLedger, Task, Team
from clearance.models import ModelRequest, ToolCall
from clearance.testing import FunctionModel

STEPS = 20
KILL_AT = 15


def script(kill_at: int | None) -> FunctionModel:
    """The model: call ``append`` until 19 lines are appended, then answer."""
    seen = [0]

    def answer(request: ModelRequest) -> Any:
        system, user = (m.content for m in request.prompt.messages)
        if system != "You append lines.":
            return "summary"  # the coordinator's synthesis
        seen[0] += 1
        if kill_at is not None and seen[0] == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
        done = user.count("appended line")
        if done < STEPS - 1:
            return [ToolCall(id=f"c{done}", name="append", arguments={"line": str(done)})]
        return f"appended {done} lines"

    return FunctionModel(answer)


def session(model: FunctionModel) -> dict[str, int]:
    """Model requests and prompt tokens a session paid for (counted by the model)."""
    prompt = sum(model.count_tokens(m.content) for r in model.requests for m in r.prompt.messages)
    return {"requests": len(model.requests), "prompt_tokens": prompt}


def _parts(tmp: Path) -> tuple[Team, Task, Any]:
    effects = tmp / "effects.log"

    def append(line: str) -> str:
        """Append a line to the effects file."""
        with open(effects, "a") as out:
            out.write(line + "\n")
        return f"appended line {line}"

    team = Team(agents=(Agent(
        name="scribe", instructions="You append lines.", tools=("append",),
        limits=AgentLimits(max_steps=STEPS + 5),
    ),))  # fmt: skip
    task = Task(id="lines", title="Lines", description="Append the lines.", assignee="scribe")
    return team, task, append


def _run(tmp: Path, db: str, kill_at: int | None) -> dict[str, int]:
    team, task, append = _parts(tmp)
    with RunLedger(f"sqlite:///{tmp / db}") as ledger:
        model = script(kill_at)
        orchestrator = Orchestrator(team, model=model, tools=[append], ledger=ledger)
        asyncio.run(orchestrator.run_tasks([task]))
        return session(model)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--killed":  # the child process
        _run(Path(sys.argv[2]), "killed.db", KILL_AT)
        return
    tmp = Path(tempfile.mkdtemp())
    effects = tmp / "effects.log"
    figures: dict[str, Any] = {"steps": STEPS, "killed_at": KILL_AT}
    figures["uninterrupted"] = _run(tmp, "full.db", None)
    effects.unlink()
    child = subprocess.run([sys.executable, "-m", "bench.resume", "--killed", str(tmp)])
    assert child.returncode == -signal.SIGKILL, child.returncode
    _, _, append = _parts(tmp)
    with RunLedger(f"sqlite:///{tmp / 'killed.db'}") as ledger:
        run_id = ledger.list_runs()[0].run_id
        before = ledger.calls(run_id)
        figures["killed"] = {
            "requests": len(before),
            "prompt_tokens": sum(c.usage.prompt_tokens for c in before),
        }
        resumed = script(None)
        orchestrator = Orchestrator.from_run(
            run_id, ledger=ledger, model=resumed, tools={"append": append}
        )
        result = asyncio.run(orchestrator.resume(run_id))
        figures["resume"] = session(resumed)
        figures["status"] = result.status
        replayed = ledger.events(run_id, "replayed")
        figures["replayed_model_calls"] = sum(e.data["record"] == "call" for e in replayed)
        figures["replayed_tool_calls"] = sum(e.data["record"] == "tool_call" for e in replayed)
    lines = effects.read_text().split()
    figures["side_effects"] = len(lines)
    figures["side_effects_distinct"] = len(set(lines))
    for name in ("uninterrupted", "killed", "resume"):
        f = figures[name]
        print(f"{name:14} model requests {f['requests']:3}  prompt tokens {f['prompt_tokens']:6}")
    unanswered = STEPS - (KILL_AT - 1) + 1  # steps 15..20 (15 was in flight) and the synthesis
    paid = figures["uninterrupted"]["prompt_tokens"] - figures["killed"]["prompt_tokens"]
    print(
        f"resume: {figures['resume']['requests']} requests for {unanswered} unanswered calls; "
        f"{figures['resume']['prompt_tokens']} prompt tokens for {paid} unpaid"
    )
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
