"""The main job: non-model tasks, facts from analysis, proceed-after-failure, marks, report."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from clearance import Agent, Orchestrator, RunOptions, Task, Team
from clearance._context.answers import REPEAT_MARK, TRUNCATED_MARK, mark_answer
from clearance._context.verify import verify_run
from clearance._core.errors import ConfigError
from clearance._core.step_input import StepInput
from clearance._core.teamfile import load_team_file
from clearance._reports import code_review_report
from clearance._state.queue import TaskStatus
from clearance.analysis import lint_source, module_facts
from clearance.models._base import ModelRequest, ModelResponse, Usage
from clearance.testing import FunctionModel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "code_review.yaml"
JSON_DIR = Path(json.__file__).parent
WORKER = Agent(name="worker", instructions="Do it.")
COORD = Agent(name="lead", instructions="Sum up.")
TEAM = Team(agents=(WORKER,), coordinator=COORD)


def shout(step: StepInput) -> dict[str, object]:
    """A user step: upper-cases its one file and lists what it was given."""
    (path, text), *_ = step.files.items()
    return {"path": path, "upper": text.upper(), "results": sorted(step.results)}


def explode(step: StepInput) -> str:
    raise RuntimeError("boom")


def subject(request: ModelRequest) -> str:
    return request.prompt.manifest.subject


def review_answer(request: ModelRequest) -> str:
    """A review for per-module tasks (one grounded finding, invented text besides), plain
    text for everything else."""
    if request.json_schema is None:
        return f"TEXT for {subject(request)}.\n```python\n# noinspection PyBroadException\n```"
    module = request.json_schema["properties"]["module"]["const"]
    item = request.json_schema["properties"]["findings"]["items"]["properties"]
    symbols, rules = item["symbol"]["enum"], item["rule"]["enum"]
    return json.dumps(
        {
            "module": module,
            "summary": f"{module} is reviewed here. It calls made_up_helper() on every line.",
            "findings": [
                {"severity": "low", "category": "style", "symbol": symbols[-1],
                 "rule": rules[-1], "note": "Worth a look."},
                {"severity": "high", "category": "bug", "symbol": "", "rule": "",
                 "note": "Rule S102.5 applies here."},
            ],
        }
    )  # fmt: skip


async def test_a_python_step_result_reaches_its_dependent_and_verify_passes(tmp_path, ledger):
    (tmp_path / "a.txt").write_text("hello", encoding="utf-8")
    tasks = [
        Task(id="s", title="Shout", description="d", assignee="step",
             run=f"python:{__name__}:shout", files=("a.txt",)),
        Task(id="m", title="Use it", description="d", assignee="worker", depends_on=("s",)),
    ]  # fmt: skip
    model = FunctionModel(lambda r: "ANSWER")
    orch = Orchestrator(TEAM, model=model, ledger=ledger, options=RunOptions(input_root=tmp_path))
    result = await orch.run_tasks(tasks)
    assert result.status == "completed"
    value = json.loads(result.tasks["s"].result or "")
    assert value == {"path": "a.txt", "upper": "HELLO", "results": []}
    prompts = {subject(r): r.prompt for r in model.requests}
    assert "HELLO" in prompts["task:m"].text
    assert "task_result:s" in prompts["task:m"].manifest.origins
    assert verify_run(ledger, result.run_id).ok
    events = [e for e in ledger.events(result.run_id) if e.kind == "step"]
    assert events and events[0].data["run"] == f"python:{__name__}:shout"


async def test_a_failing_step_fails_its_task_and_a_proceeding_dependent_lists_it(ledger):
    tasks = [
        Task(id="bad", title="Bad", description="d", assignee="step",
             run=f"python:{__name__}:explode"),
        Task(id="ok", title="Ok", description="d", assignee="worker"),
        Task(id="skipper", title="Skipper", description="d", assignee="worker",
             depends_on=("bad",)),
        Task(id="after", title="After", description="d", assignee="worker",
             depends_on=("bad", "ok", "skipper"), after_failure="proceed"),
    ]  # fmt: skip
    model = FunctionModel(lambda r: f"RESULT of {subject(r)}")
    result = await Orchestrator(TEAM, model=model, ledger=ledger).run_tasks(tasks)
    status = {k: v.status for k, v in result.tasks.items()}
    assert status["bad"] is TaskStatus.FAILED and status["skipper"] is TaskStatus.SKIPPED
    assert status["after"] is TaskStatus.COMPLETED
    prompt = next(r.prompt for r in model.requests if subject(r) == "task:after")
    assert "RESULT of task:ok" in prompt.text
    assert "## Prerequisite tasks that did not complete" in prompt.text
    assert "boom" in prompt.text  # the reason, never content
    assert {"task_status:bad", "task_status:skipper"} <= set(prompt.manifest.origins)
    assert verify_run(ledger, result.run_id).ok


async def test_unknown_steps_and_bad_run_values_are_refused_before_the_run(ledger):
    with pytest.raises(ConfigError, match="unknown step"):
        await Orchestrator(TEAM, model=FunctionModel(str), ledger=ledger).run_tasks(
            [Task(id="s", title="t", description="d", assignee="step", run="step:nope")]
        )
    with pytest.raises(ConfigError, match="no function"):
        await Orchestrator(TEAM, model=FunctionModel(str), ledger=ledger).run_tasks(
            [Task(id="s", title="t", description="d", assignee="s", run="python:json:nope")]
        )
    for bad in ("step:", "python:os", "shell:rm -rf /", "python:a b:c"):
        with pytest.raises(ConfigError, match="run"):
            Task(id="s", title="t", description="d", assignee="s", run=bad)


def test_team_file_keys_are_validated_in_one_line(tmp_path):
    base = "agents:\n  - name: a\n    instructions: x\n"
    cases = {
        "    sampling: {top_p: 5}\n": "top_p",
        "    sampling: {repeat_penalty: 0.5}\n": "repeat_penalty",
        "    sampling: {stop: ['']}\n": "stop",
        "    sampling: {temprature: 1}\n": "temprature",
        "tasks:\n  - {id: t, title: t, description: d}\n": "an assignee",
        "tasks:\n  - {id: t, title: t, description: d, run: 'sh:x'}\n": "run",
        "tasks:\n  - {id: t, title: t, description: d, assignee: a, after_failure: go}\n": (
            "after_failure"
        ),
        "synthesis_from: [nope]\ntasks:\n  - {id: t, title: t, description: d, assignee: a}\n": (
            "synthesis_from"
        ),
    }
    for extra, needle in cases.items():
        path = tmp_path / "team.yaml"
        path.write_text(base + extra, encoding="utf-8")
        with pytest.raises(ConfigError, match=needle) as info:
            load_team_file(path)
        assert "\n" not in str(info.value)
    path.write_text(
        base + "    sampling: {temperature: 0.3, top_p: 0.9, repeat_penalty: 1.3, stop: [END]}\n",
        encoding="utf-8",
    )
    sampling = load_team_file(path).team.agents[0].sampling
    assert (sampling.temperature, sampling.top_p, sampling.repeat_penalty, sampling.stop) == (
        0.3, 0.9, 1.3, ("END",),
    )  # fmt: skip


async def test_sampling_reaches_the_request(ledger):
    agent = Agent(name="worker", instructions="x", sampling=load_sampling())
    model = FunctionModel(lambda r: "ok")
    await Orchestrator(Team(agents=(agent,), coordinator=COORD), model=model,
                       ledger=ledger).run_tasks(
        [Task(id="a", title="A", description="d", assignee="worker")]
    )  # fmt: skip
    request = next(r for r in model.requests if subject(r) == "task:a")
    assert (request.temperature, request.top_p, request.repeat_penalty, request.stop) == (
        0.5, 0.8, 1.4, ("STOP",),
    )  # fmt: skip


def load_sampling():
    from clearance._core.spec import Sampling

    return Sampling(temperature=0.5, top_p=0.8, repeat_penalty=1.4, stop=("STOP",))


class CutOffModel:
    """Answers every call with a looping text cut off at the output limit."""

    model_id = "test:cutoff"
    context_window = None

    async def request(self, request: ModelRequest) -> ModelResponse:
        text = "The final answer is:\n- json_encoder" + "_list" * 60
        return ModelResponse(
            text=text, usage=Usage(requests=1), model_id=self.model_id, finish_reason="length"
        )

    def count_tokens(self, text: str) -> int:
        return len(text) // 4


async def test_cut_off_and_looping_answers_are_marked_everywhere(ledger):
    orch = Orchestrator(TEAM, model=CutOffModel(), ledger=ledger)
    result = await orch.run_tasks(
        [Task(id="a", title="A", description="d", assignee="worker"),
         Task(id="b", title="B", description="d", assignee="worker", depends_on=("a",))]
    )  # fmt: skip
    a = result.tasks["a"].result or ""
    assert TRUNCATED_MARK in a and REPEAT_MARK in a and "_list_list" not in a
    assert result.synthesis is not None and TRUNCATED_MARK in result.synthesis
    marked = {e.subject for e in ledger.events(result.run_id) if e.kind == "answer_marked"}
    assert {"task:a", "task:b", "synthesis"} <= marked
    calls = ledger.calls(result.run_id)
    assert all(c.finish_reason == "length" for c in calls)
    assert verify_run(ledger, result.run_id).ok


def test_mark_answer_leaves_normal_answers_alone():
    text = "- decoder.py parses\n- encoder.py writes\n|---|---|"
    assert mark_answer(text, finish_reason="stop").text == text
    # A finished answer is kept whole, repeated lines too; only a cut-off one loses its loop.
    looping = "a\nsame\nsame\nsame\nsame"
    assert mark_answer(looping, finish_reason="stop").text == looping
    cut = mark_answer(looping + "\nsame\nsame\nsa", finish_reason="length").text
    assert cut.startswith("a\nsame\n\n[repetition")


def test_module_facts_are_true_to_the_source_and_bounded():
    source = (JSON_DIR / "decoder.py").read_text(encoding="utf-8")
    facts = module_facts(
        StepInput(task_id="t", title="t", description="d", files={"decoder.py": source},
                  input_name="json")
    )  # fmt: skip
    tree = ast.parse(source)
    defs = {n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)}
    assert {p["name"] for p in facts["public"] if p["kind"] != "constant"} <= defs
    assert "JSONDecoder" in {p["name"] for p in facts["public"]}
    assert facts["lines"] == len(source.splitlines())
    assert "scanner" in facts["imports"]
    assert facts["excerpt"]["text"] in source
    assert all(f["code"] and f["line"] > 0 for f in facts["findings"])
    assert "lint_problem" not in facts  # ruff ran
    assert len(json.dumps(facts)) < 12_000


def test_ruff_ignores_configuration_in_the_reviewed_folder(tmp_path, monkeypatch):
    # Ruff runs in an empty folder with --isolated: a hostile ruff.toml cannot silence it
    # or make it read other files.
    (tmp_path / "ruff.toml").write_text("[lint]\nignore = ['F']\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    lint = lint_source("x.py", "import os\n")
    assert lint.problem is None and [f["code"] for f in lint.findings] == ["F401"]


def big_package(root: Path) -> None:
    root.mkdir()
    (root / "__init__.py").write_text('"""Synthetic package."""\nfrom .big import f0\n')
    body = ['"""A big module."""', "from . import small", ""]
    i = 0
    while sum(len(line) + 1 for line in body) < 60_000:
        body += [f"def f{i}(x):", f"    if x > {i}:", f"        return x - {i}", "    return x", ""]
        i += 1
    (root / "big.py").write_text("\n".join(body), encoding="utf-8")
    (root / "small.py").write_text('"""Small."""\n\n\ndef helper(y):\n    return eval(y)\n')


@pytest.mark.parametrize("package", ["json", "synthetic"])
async def test_the_code_review_example_reports_every_module(tmp_path, ledger, package):
    if package == "json":
        loaded = load_team_file(EXAMPLE)
        expected = sorted(p.name for p in JSON_DIR.glob("*.py"))
    else:
        big_package(tmp_path / "pkg")
        assert (tmp_path / "pkg" / "big.py").stat().st_size >= 60_000
        loaded = load_team_file(EXAMPLE, input_dir=tmp_path / "pkg")
        expected = ["__init__.py", "big.py", "small.py"]
    model = FunctionModel(review_answer)
    orch = Orchestrator(
        loaded.team,
        model=model,
        ledger=ledger,
        options=RunOptions(
            input_root=loaded.input_root, synthesis_from=loaded.synthesis_from, max_concurrency=2
        ),
    )
    result = await orch.run_tasks(loaded.tasks, goal=loaded.spec.goal)
    assert result.status == "completed", {k: v.error for k, v in result.tasks.items() if v.error}
    assert verify_run(ledger, result.run_id).ok
    report = code_review_report(result, loaded.tasks, model_id="test:function")
    md = report.markdown
    for name in expected:
        assert f"### `{name}`" in md
        source = (loaded.input_root / name).read_text(encoding="utf-8")
        section = md.split(f"### `{name}`", 1)[1].split("\n### ", 1)[0]
        assert f"{len(source.splitlines())} lines" in section  # a true, specific fact
        assert f"Model review (test:function): {name} is reviewed here." in section
        assert "made_up_helper" not in section and "S102.5" not in section
        assert "Worth a look." in section  # the grounded finding is kept
    # What failed grounding is counted, not shown: per module one sentence of the summary
    # and one note; a code block in the synthesis.
    n = len(expected)
    assert report.data["left_out"] == {"code": 1, "name": n, "rule code": n}
    assert f"{2 * n + 1} model sentences or findings failed grounding" in md
    assert "```" not in md and "noinspection" not in md
    assert "Coordinator (test:function, sentences that pass grounding): TEXT for synthesis." in md
    # Each review's schema only allows its own module's symbols and rules.
    for request in model.requests:
        if request.json_schema is not None:
            module = request.json_schema["properties"]["module"]["const"]
            item = request.json_schema["properties"]["findings"]["items"]["properties"]
            facts = json.loads(
                result.tasks["facts-" + module.removesuffix(".py").replace("/", ".")].result or ""
            )
            real = {f["name"] for f in facts["most_complex"]} | {""}
            assert set(item["symbol"]["enum"]) <= real and "x-enum-from" not in item["symbol"]
            assert set(item["rule"]["enum"]) <= set(facts["rule_counts"]) | {""}
    # The synthesis sees the package facts once, not the module facts.
    synthesis = next(r.prompt for r in model.requests if subject(r) == "synthesis")
    assert "task_result:package" in synthesis.manifest.origins
    assert not any(o.startswith("task_result:facts-") for o in synthesis.manifest.origins)
    # No review prompt holds a whole module: facts and one excerpt only.
    for request in model.requests:
        assert request.prompt.manifest.total_tokens < 6000
    if package == "synthetic":
        assert "`small.py:5`" in md and "S307" in md  # eval found by ruff, ranked first
        assert md.index("`small.py:5`") < md.index("## Modules")
    lines = [line for line in md.splitlines() if line.strip()]
    assert not any(a == b == c for a, b, c in zip(lines, lines[1:], lines[2:], strict=False))


def test_run_writes_the_report_and_json_with_fake_models(tmp_path):
    import subprocess
    import sys

    out, js = tmp_path / "report.md", tmp_path / "result.json"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2] / "src")}
    done = subprocess.run(
        [sys.executable, "-c", "from clearance.cli import main; main()", "run", str(EXAMPLE),
         "--model", "fake:echo", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
         "--output", str(out), "--json", str(js)],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path, check=False,
    )  # fmt: skip
    # the fake model answers the review schema with a valid instance: every task completes
    assert done.returncode == 0, done.stdout + done.stderr
    md = out.read_text(encoding="utf-8")
    for name in sorted(p.name for p in JSON_DIR.glob("*.py")):
        assert f"### `{name}`" in md
    data = json.loads(js.read_text(encoding="utf-8"))
    assert len(data["modules"]) == len(list(JSON_DIR.glob("*.py")))
    assert {"tasks", "look_here_first", "summary", "run"} <= set(data)
    assert "(completed); model fake:echo" in md


def test_inspect_marks_cut_off_answers(tmp_path):
    import asyncio

    from typer.testing import CliRunner

    from clearance._state.ledger import RunLedger
    from clearance.cli import app

    url = f"sqlite:///{tmp_path / 'runs.db'}"
    with RunLedger(url) as ledger:
        orch = Orchestrator(TEAM, model=CutOffModel(), ledger=ledger)
        result = asyncio.run(
            orch.run_tasks([Task(id="a", title="A", description="d", assignee="worker")])
        )
    shown = CliRunner().invoke(app, ["inspect", result.run_id, "--db", url, "--no-prompt"])
    assert shown.exit_code == 0, shown.output
    assert "CUT OFF at the output limit" in shown.output


def test_graph_estimate_flags_a_task_over_budget(tmp_path):
    from typer.testing import CliRunner

    from clearance.cli import app

    (tmp_path / "big.py").write_text("x = 1\n" * 20_000, encoding="utf-8")
    team = tmp_path / "team.yaml"
    team.write_text(
        "agents:\n  - name: a\n    instructions: x\n    limits: {max_prompt_tokens: 1000}\n"
        "tasks:\n  - {id: t, title: t, description: d, assignee: a, files: [big.py]}\n"
        "  - {id: s, title: s, description: d, run: 'step:module_facts', files: [big.py]}\n",
        encoding="utf-8",
    )
    shown = CliRunner().invoke(
        app, ["graph", str(team), "--input", str(tmp_path), "--estimate"], terminal_width=200
    )
    assert shown.exit_code == 1
    assert "OVER BUDGET" in shown.output and "step (no model)" in shown.output


def test_graph_estimate_of_the_example_bounds_briefs_and_gives_a_wall_time_range():
    import re

    from typer.testing import CliRunner

    from clearance.cli import app

    shown = CliRunner().invoke(app, ["graph", str(EXAMPLE), "--estimate"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    reviews = [int(m) for m in re.findall(r"review-\w+\s*│\s*(\d+)", shown.output)]
    assert len(reviews) == len(list(JSON_DIR.glob("*.py")))
    assert all(r < 1300 for r in reviews)  # a brief's bound, not a step's 4000 tokens
    match = re.search(r"wall time on the embedded model: about (\d+) to (\d+) s", shown.output)
    assert match and 0 < int(match.group(1)) < int(match.group(2))
