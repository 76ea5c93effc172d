"""``clearance chat`` and the team file's run settings: what it records, what it refuses.

- The session keeps to the team file's ``budget:`` and ``prices:``, but its run's config did
  not record them, so ``clearance inspect`` of a chat session could not show which budget
  applied: it records them as a run does.
- ``memory.on_error: continue`` was only warned about: a chat turn fails with its memory (the
  conversation's recall, its shared conversation and the monitor's records of dropped turns
  have no path that goes on without memory), so it is refused in one line, exit code 2.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from clearance import RunLedger

SRC = str(Path(__file__).parents[2] / "src")
AGENT = {"name": "a", "instructions": "You answer.", "limits": {"max_output_tokens": 32}}
TASK = {"id": "t", "title": "T", "description": "Say hello.", "assignee": "a"}
PRICES = {"fake:x": {"input_per_mtok": 1.5, "output_per_mtok": 2.0}}


def clearance(cwd: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CLEARANCE_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SRC, env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{cwd / 'runs.db'}"],
        cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def team(tmp_path: Path, **settings: Any) -> None:
    body = {"model": "fake:x", "model_options": {"context_window": 4096}, **settings,
            "agents": [AGENT], "tasks": [TASK]}  # fmt: skip
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(body))


def chat(tmp_path: Path, lines: str = "hello\n") -> tuple[subprocess.CompletedProcess[str], str]:
    result = clearance(tmp_path, "chat", "team.yaml", "--agent", "a", stdin=lines)
    match = re.search(r"chat run (\S+):", result.stderr)
    return result, match.group(1) if match else ""


def inspected_config(tmp_path: Path, run_id: str) -> dict[str, Any]:
    result = clearance(tmp_path, "inspect", run_id, "--json")
    assert result.returncode == 0, result.stderr
    config: dict[str, Any] = json.loads(result.stdout)["run"]["config"]
    return config


@pytest.mark.parametrize(
    ("settings", "budget", "prices"),
    [
        ({"budget": {"tokens": 100_000}}, {"tokens": 100_000}, None),
        (
            {"budget": {"tokens": 100_000, "cost_usd": 0.5}, "prices": PRICES},
            {"tokens": 100_000, "cost_usd": 0.5},
            PRICES,
        ),
    ],
)
def test_a_chat_session_records_its_budget_as_a_run_does(tmp_path, settings, budget, prices):
    # Before: the session kept to the budget, but its config held no budget and no prices.
    team(tmp_path, **settings)
    result, chat_id = chat(tmp_path)
    assert result.returncode == 0, result.stderr
    ran = clearance(tmp_path, "run", "team.yaml")
    assert ran.returncode == 0, ran.stderr
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}", read_only=True) as ledger:
        (run_id,) = [r.run_id for r in ledger.list_runs() if r.run_id != chat_id]
    shown, by_run = inspected_config(tmp_path, chat_id), inspected_config(tmp_path, run_id)
    assert shown["budget"] == budget == by_run["budget"]
    assert shown.get("prices") == prices == by_run.get("prices")
    assert clearance(tmp_path, "verify", chat_id).returncode == 0


def test_a_chat_session_without_a_budget_records_none(tmp_path):
    team(tmp_path)
    result, chat_id = chat(tmp_path)
    assert result.returncode == 0, result.stderr
    config = inspected_config(tmp_path, chat_id)
    assert "budget" not in config and "prices" not in config


def test_memory_on_error_continue_is_refused_in_one_line_before_the_session(tmp_path):
    # Before: a warning, then a memory failure ended the session all the same.
    team(tmp_path, memory={"on_error": "continue"})
    body = yaml.safe_load((tmp_path / "team.yaml").read_text())
    body["agents"][0]["memory"] = {"recall": 3}
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(body))
    result, _ = chat(tmp_path)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines() == [
        "error: team.yaml: memory.on_error: continue has no effect in clearance chat: a "
        "failure of the memory ends the session (remove on_error, or run the team file)"
    ]
    assert result.stdout == ""
    assert sorted(os.listdir(tmp_path)) == ["team.yaml"]  # no ledger, no memory made
    body["memory"] = {"on_error": "fail"}
    (tmp_path / "team.yaml").write_text(yaml.safe_dump(body))
    result, chat_id = chat(tmp_path)
    assert result.returncode == 0, result.stderr
    assert inspected_config(tmp_path, chat_id)["memory"]["on_error"] == "fail"
