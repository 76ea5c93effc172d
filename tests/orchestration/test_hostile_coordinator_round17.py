"""A hostile coordinator, round 17: plans that hide what they say, and a worker in its name.

Each test scripts the coordinator on a real OpenAI-compatible server on 127.0.0.1 and drives
the real CLI (``clearance run --goal``, ``clearance plan`` then ``clearance run PLAN``), then
asserts on what the model was sent, the error line and exit code, what the ledger recorded
and ``clearance verify``.
"""

from __future__ import annotations

import json
import time
import unicodedata
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from clearance import RunLedger, verify_run
from clearance._context.plan_answer import parse_plan
from clearance.cli._app import app
from cpu_time import cpu_timer

pytestmark = pytest.mark.network

TEAM = """\
name: planned
agents:
  - {name: writer, instructions: "You write.", role: writes text}
  - {name: checker, instructions: "You check.", role: checks text}
"""


def plan_of(*tasks: dict[str, Any]) -> str:
    return json.dumps({"tasks": list(tasks)})


def task(tid: str, title: str, assignee: str = "writer", **extra: Any) -> dict[str, Any]:
    return {"id": tid, "title": title, "description": f"Do {tid}.", "assignee": assignee,
            "depends_on": [], **extra}  # fmt: skip


GOOD = plan_of(task("draft", "Draft"), task("check", "Check", "checker", depends_on=["draft"]))


def is_plan(messages: list[dict[str, Any]]) -> bool:
    return "You are planning work for a team" in messages[-1]["content"]


@pytest.fixture
def serve(tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """``serve(plans, team=TEAM)``: a server answering each planning prompt with the next plan."""
    monkeypatch.chdir(tmp_path)

    def start(plans: list[str], team: str = TEAM) -> Any:
        (tmp_path / "team.yaml").write_text(team)
        answers = iter(plans)
        url = openai_server(lambda messages: next(answers) if is_plan(messages) else "done")
        monkeypatch.setenv("OPENAI_BASE_URL", url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        return url

    return start


def cli(tmp: Path, *args: str) -> Any:
    return CliRunner().invoke(app, [*args, "--db", f"sqlite:///{tmp / 'runs.db'}"])


def plan_prompts(url: Any) -> list[str]:
    return [b["messages"][-1]["content"] for b in url.bodies if is_plan(b["messages"])]


def error_line(output: str) -> str:
    (line,) = [x for x in output.splitlines() if x.startswith("error:")]
    return line


# -- a plan whose text reads back otherwise than it was planned -------------------------------


def test_a_next_line_character_is_sent_back_so_the_plan_file_replays_unedited(
    tmp_path: Path, serve: Any
) -> None:
    # U+0085 (NEL) is written into plan.yaml as it is, and YAML reads it back as a space: an
    # unedited plan replayed as `edited: true`, with a description the coordinator never
    # planned. A plan never holds one now: it is sent back for repair.
    nel = plan_of(task("draft", "Draft", description="Write it.\x85Then stop."))
    url = serve([nel, GOOD])
    result = cli(tmp_path, "plan", "team.yaml", "--goal", "G", "--model", "openai:m")
    assert result.exit_code == 0, result.output
    first, repair = plan_prompts(url)
    assert "tasks.0.description: holds the character '\\x85'" in repair
    assert "holds the character" not in first
    written = yaml.safe_load((tmp_path / "plan.yaml").read_text())
    assert [t["description"] for t in written["tasks"]] == ["Do draft.", "Do check."]
    result = cli(tmp_path, "run", "plan.yaml", "--model", "openai:m")
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        runs = ledger.list_runs()
        assert len(runs) == 2 and all(verify_run(ledger, r.run_id).ok for r in runs)
        replay = next(r for r in runs if r.goal and not ledger.calls(r.run_id, subject="plan"))
        (link,) = [e for e in ledger.events(replay.run_id) if e.kind == "plan"]
        assert link.data["edited"] is False


def test_a_title_with_a_bidirectional_override_is_refused_in_one_line(
    tmp_path: Path, serve: Any
) -> None:
    # "Draft<RLO>txt.exe" shows as another title than it reads, in plan.yaml and the run page.
    bidi = plan_of(task("draft", "Draft\u202etxt.exe"))
    url = serve([bidi, bidi])
    started = time.monotonic()
    result = cli(tmp_path, "run", "team.yaml", "--goal", "G", "--model", "openai:m")
    assert time.monotonic() - started < 5
    assert result.exit_code == 2, result.output
    line = error_line(result.output)
    assert "tasks.0.title: holds the character '\\u202e'" in line
    assert "\u202e" not in result.output
    assert len(plan_prompts(url)) == 2  # one repair, then the refusal
    assert all(not is_plan(b["messages"]) for b in url.bodies[2:])  # no task ran
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        (run,) = ledger.list_runs()
        assert run.status == "failed" and "tasks.0.title" in (run.error or "")
        assert run.graph is None
        assert verify_run(ledger, run.run_id).ok


@pytest.mark.parametrize("field", ["title", "description"])
@pytest.mark.parametrize("char", ["\u202e", "\u2066", "\x85", "\x9b"])
def test_each_hiding_character_is_refused_in_titles_and_descriptions(field: str, char: str):
    planned = task("a", "A")
    planned[field] = f"x{char}y"
    # (a C1 control in a title is refused as any control character is in a one-line label)
    with pytest.raises(ValueError, match=rf"tasks\.0\.{field}: .*the (control )?character"):
        parse_plan(plan_of(planned), agents=["writer"])


def test_right_to_left_text_and_marks_are_still_plain_text() -> None:
    # Hebrew and Arabic text, and the invisible direction marks, are text, not overrides.
    planned = task(
        "a", "\u05e9\u05dc\u05d5\u05dd \u200f", description="\u0645\u0631\u062d\u0628\u0627\n"
    )
    graph = parse_plan(plan_of(planned), agents=["writer"])
    assert graph.get("a").title == "\u05e9\u05dc\u05d5\u05dd \u200f"


# -- titles that look alike --------------------------------------------------------------------

NFC = unicodedata.normalize("NFC", "Caf\u00e9")
NFD = unicodedata.normalize("NFD", "Caf\u00e9")


@pytest.mark.parametrize(
    ("first", "second"),
    [(NFC, NFD), ("Report", "Re\u200bport"), ("Report", "\uff32eport"), ("Report", "REPORT")],
)
def test_titles_that_look_alike_are_refused_naming_both(first: str, second: str) -> None:
    with pytest.raises(ValueError, match=r"tasks 'a' and 'b' have the same title"):
        parse_plan(plan_of(task("a", first), task("b", second)), agents=["writer"])


def test_look_alike_titles_are_repaired_so_each_dependent_label_is_its_own(
    tmp_path: Path, serve: Any
) -> None:
    # Results are labelled by title where dependents and the synthesis read them: "Café"
    # twice (composed, then decomposed) were two labels no one could tell apart.
    alike = plan_of(task("a", NFC), task("b", NFD), task("c", "Use", depends_on=["a", "b"]))
    fixed = plan_of(task("a", NFC), task("b", "Tea"), task("c", "Use", depends_on=["a", "b"]))
    url = serve([alike, fixed])
    result = cli(tmp_path, "run", "team.yaml", "--goal", "G", "--model", "openai:m")
    assert result.exit_code == 0, result.output
    first, repair = plan_prompts(url)
    assert "have the same" not in first
    assert "tasks 'a' and 'b' have the same titles 'Caf\\xe9' and 'Cafe\\u0301'" in repair
    prompts = [b["messages"][-1]["content"] for b in url.bodies]
    (use,) = [p for p in prompts if p.startswith("# Task") and "Do c." in p]
    assert f"~~~~ {NFC} (by writer)\n" in use and "~~~~ Tea (by writer)\n" in use
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        (run,) = ledger.list_runs()
        assert [t["title"] for t in run.graph or []] == [NFC, "Tea", "Use"]
        assert verify_run(ledger, run.run_id).ok


# -- a worker named like the built-in coordinator -----------------------------------------------


def test_a_worker_named_coordinator_without_a_declared_coordinator_is_refused(
    tmp_path: Path, serve: Any
) -> None:
    # The built-in coordinator is named "coordinator": the plan could assign tasks to a worker
    # of that name, recorded under the planner's name, and verify then read the worker's
    # calls against the built-in coordinator's instructions (a finding on an honest run).
    team = TEAM + '  - {name: coordinator, instructions: "You do.", role: does}\n'
    url = serve([plan_of(task("a", "A", "coordinator"))], team=team)
    started = time.monotonic()
    result = cli(tmp_path, "run", "team.yaml", "--goal", "G", "--model", "openai:m")
    assert time.monotonic() - started < 5
    assert result.exit_code == 2, result.output
    assert error_line(result.output) == (
        "error: team.yaml: agents: 'coordinator' is the built-in coordinator's name: give the "
        "worker another, or declare a coordinator (the ledger and verify tell agents apart by name)"
    )
    assert url.bodies == []  # refused before any call
    if (tmp_path / "runs.db").exists():  # nothing started
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            assert ledger.list_runs() == []


def test_a_worker_named_coordinator_beside_a_declared_coordinator_runs_and_verifies(
    tmp_path: Path, serve: Any
) -> None:
    team = TEAM + (
        '  - {name: coordinator, instructions: "You do.", role: does}\n'
        'coordinator: {name: lead, instructions: "You lead."}\n'
    )
    serve([plan_of(task("a", "A", "coordinator"))], team=team)
    result = cli(tmp_path, "run", "team.yaml", "--goal", "G", "--model", "openai:m")
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        (run,) = ledger.list_runs()
        assert verify_run(ledger, run.run_id).ok


# -- a plan answer far bigger than any plan -----------------------------------------------------


def test_a_million_values_are_refused_in_a_fraction_of_a_second() -> None:
    # 660,000 empty objects (2 MB) took the strict reader about 2 s, 1,000,000 about 3.5 s;
    # a coordinator with a larger max_output_tokens answers that much. The plan is refused
    # on the fast read once it passes 10,000 values, or on its size alone.
    from clearance._context.plan_answer import MAX_PLAN_VALUES

    for count in (660_000, 1_000_000):
        answer = '{"tasks": [' + ",".join(["{}"] * count) + "]}"
        with (
            cpu_timer() as cpu,
            pytest.raises(ValueError, match=r"the plan's JSON (holds over 10,000 values|is 3,0)"),
        ):
            parse_plan(answer, agents=["writer"])
        assert cpu.seconds < 1
    junk = task("a", "A", junk=[[]] * (MAX_PLAN_VALUES + 1))  # an ignored key counts too
    with pytest.raises(ValueError, match=r"holds over 10,000 values"):
        parse_plan(plan_of(junk), agents=["writer"])


def test_the_largest_plan_a_coordinator_may_write_is_still_read() -> None:
    # 20 tasks of the longest fields, every character escaped, pretty-printed: about 1.1 MB.
    ids = [f"{i}".rjust(128, "t") for i in range(20)]
    tasks = [
        task(ids[i], f"{i}".rjust(300, "\u00e9"), description="\u00e9" * 7990 + f"{i}",
             depends_on=ids[:i])
        for i in range(20)
    ]  # fmt: skip
    answer = json.dumps({"tasks": tasks}, indent=4)
    assert len(answer) > 1_000_000
    assert len(parse_plan(answer, agents=["writer"])) == 20


def test_a_coordinator_answering_with_a_million_objects_is_refused_quickly_on_the_cli(
    tmp_path: Path, serve: Any
) -> None:
    team = (
        TEAM
        + "coordinator: {name: lead, instructions: Plan., limits: {max_output_tokens: 65536}}\n"
    )
    flood = '{"tasks": [' + ",".join(["{}"] * 600_000) + "]}"
    url = serve([flood, flood], team=team)
    started = time.monotonic()
    result = cli(tmp_path, "run", "team.yaml", "--goal", "G", "--model", "openai:m")
    assert result.exit_code == 2, result.output
    assert "the plan's JSON holds over 10,000 values" in error_line(result.output)
    assert len(plan_prompts(url)) == 2
    assert time.monotonic() - started < 5  # 8 s before: two strict reads of 1.8 MB
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        (run,) = ledger.list_runs()
        assert run.status == "failed" and "10,000 values" in (run.error or "")
        assert verify_run(ledger, run.run_id).ok


def test_a_chat_team_with_an_agent_named_coordinator_still_chats(tmp_path: Path) -> None:
    # Chat runs no coordinator: the built-in one's name is free there (it chatted before
    # the refusal above was added, and must still).
    import subprocess
    import sys

    src = str(Path(__file__).parents[2] / "src")
    (tmp_path / "team.yaml").write_text(
        'name: solo\nagents:\n  - {name: coordinator, instructions: "You answer."}\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "coordinator",
         "--model", "fake:x", "--context-window", "4000",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, input="hello\n", capture_output=True, text=True, timeout=120,
        env={**__import__("os").environ, "PYTHONPATH": src},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip()


def test_a_library_orchestrator_refuses_a_worker_named_coordinator_without_one() -> None:
    from clearance import Agent, Orchestrator, Team
    from clearance._core.errors import ConfigError
    from clearance.testing import FakeModel

    team = Team(agents=(Agent(name="coordinator", instructions="You do."),), name="t")
    with pytest.raises(ConfigError, match="built-in coordinator's name"):
        Orchestrator(team, model=FakeModel("x"))
