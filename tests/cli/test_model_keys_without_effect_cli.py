"""Model keys that were accepted but changed nothing: made to work, or refused at load.

- ``model_options.context_window`` (and ``--context-window``) did not reach a ``fake:`` model
  (its prompts were unbounded) nor a provider an installed package registers; the fake now
  takes it, and a model that takes no window has it refused (exit 2, one line).
- ``clearance chat`` ignored the team file's ``budget:`` (and so its ``prices:``) and its
  ``executor:``: the budget now bounds the session's calls as a run's, and an executor other
  than the local one is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import clearance
from clearance import RunLedger
from clearance.cli import app

runner = CliRunner()

AGENT = "{name: a, instructions: You answer., limits: {max_output_tokens: 100}}"
COORDINATOR = "{name: c, instructions: You sum up., limits: {max_output_tokens: 50}}"


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(body)
    return path


def fake_team(tmp_path: Path, extra: str = "") -> Path:
    return write(
        tmp_path,
        f"model: fake:x\n{extra}agents: [{AGENT}]\ncoordinator: {COORDINATOR}\n"
        "tasks: [{id: t, title: T, description: Say hello., assignee: a}]\n",
    )


def run(tmp_path: Path, path: Path, *extra: str):
    args = ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db", *extra]
    return runner.invoke(app, args)


def chat(tmp_path: Path, path: Path, text: str, *extra: str):
    args = ["chat", str(path), "--agent", "a", "--db", f"sqlite:///{tmp_path}/r.db", *extra]
    return runner.invoke(app, args, input=text)


def one_line(result, exit_code: int = 2) -> str:
    assert result.exit_code == exit_code, result.output
    assert "Traceback" not in result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    return lines[0]


# -- the fake model takes the window ------------------------------------------------------


def test_the_team_files_window_bounds_a_fake_models_prompt(tmp_path: Path) -> None:
    # Before: the window never reached fake:x, and the task ran with no prompt bound.
    result = run(tmp_path, fake_team(tmp_path, "model_options: {context_window: 110}\n"))
    # 110 tokens of window less 100 of output: 10 for the prompt, which is larger.
    assert "max_prompt_tokens exceeded" in result.output, result.output
    assert "> 10" in result.output
    assert "model calls: 0" in result.output


def test_the_run_option_window_bounds_a_fake_models_prompt(tmp_path: Path) -> None:
    result = run(tmp_path, fake_team(tmp_path), "--context-window", "110")
    assert "> 10" in result.output, result.output
    assert "model calls: 0" in result.output


def test_a_roomy_window_lets_the_fake_answer(tmp_path: Path) -> None:
    result = run(tmp_path, fake_team(tmp_path, "model_options: {context_window: 4096}\n"))
    assert result.exit_code == 0, result.output
    with RunLedger(f"sqlite:///{tmp_path}/r.db") as ledger:
        (record,) = ledger.list_runs()
        calls = ledger.calls(record.run_id, subject="task:t")
    assert [c.model_id for c in calls] == ["fake:x"]


def test_chat_takes_the_team_files_window_for_a_fake_model(tmp_path: Path) -> None:
    # Before: "the context window of fake:x is unknown; give --context-window N".
    path = fake_team(tmp_path, "model_options: {context_window: 300}\n")
    result = chat(tmp_path, path, "hello\n" + "word " * 400 + "\n")
    assert result.exit_code == 0, result.output
    assert "context window of fake:x is unknown" not in result.output
    # 300 tokens less 100 for the answer: the long message can never fit and is not sent.
    assert "the message was not sent" in result.output, result.output
    with RunLedger(f"sqlite:///{tmp_path}/r.db") as ledger:
        (record,) = ledger.list_runs()
        calls = ledger.calls(record.run_id)
    assert len(calls) == 1 and "hello" in calls[0].messages[-1]["content"]


# -- a provider that takes no window -------------------------------------------------------

PROVIDER = '''\
from clearance.models import ModelResponse, Usage


class Ignoring:
    """Takes any option, and keeps its own window."""

    def __init__(self, name, **options):
        self.model_id = f"myprov:{name}"
        self.context_window = 4096

    async def request(self, request):
        return ModelResponse(text="ok", usage=Usage(requests=1, prompt_tokens=3,
                             completion_tokens=1), model_id=self.model_id)

    def count_tokens(self, text):
        return len(text.split())


class Windowed(Ignoring):
    """Takes the window it is given."""

    def __init__(self, name, *, context_window=None):
        super().__init__(name)
        self.model_id = f"winprov:{name}"
        self.context_window = context_window
'''


def install(folder: Path) -> dict[str, str]:
    """Two providers "installed" on ``folder``; the environment that finds them."""
    (folder / "myprov_clearance.py").write_text(PROVIDER)
    info = folder / "myprov_clearance-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: myprov-clearance\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[clearance.models]\nmyprov = myprov_clearance:Ignoring\n"
        "winprov = myprov_clearance:Windowed\n"
    )
    source = str(Path(clearance.__file__).parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), source])}


def cli(folder: Path, env: dict[str, str], *args: str, stdin: str = "") -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "clearance", *args, "--db", f"sqlite:///{folder}/r.db"],
        cwd=folder, env=env, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.returncode, done.stdout + done.stderr


def third_party_team(tmp_path: Path, model: str, options: str) -> Path:
    return write(
        tmp_path,
        f"model: {model}\nmodel_options: {options}\nagents: [{AGENT}]\n"
        f"coordinator: {COORDINATOR}\n"
        "tasks: [{id: t, title: T, description: Say hello., assignee: a}]\n",
    )


def test_a_window_for_a_provider_that_takes_none_is_refused(tmp_path: Path) -> None:
    env = install(tmp_path)
    third_party_team(tmp_path, "myprov:tiny", "{context_window: 2048}")
    for args, stdin in (
        (("run", "team.yaml"), ""),
        (("chat", "team.yaml", "--agent", "a"), "hi\n"),
    ):
        code, output = cli(tmp_path, env, *args, stdin=stdin)
        assert code == 2, output
        (line,) = output.strip().splitlines()
        assert line == (
            "error: team.yaml: model_options.context_window: has no effect on 'myprov:tiny': "
            "it reaches openai:, anthropic:, fake: and llama-cpp: models only (give a model "
            "that takes a window its own in model_options.by_model)"
        ), line
    # The run's option is named as given.
    third_party_team(tmp_path, "myprov:tiny", "{}")
    code, output = cli(tmp_path, env, "run", "team.yaml", "--context-window", "2048")
    assert code == 2, output
    assert "error: team.yaml: --context-window: has no effect on 'myprov:tiny'" in output


def test_plan_and_graph_name_the_file_of_a_window_a_provider_takes_none_of(
    tmp_path: Path,
) -> None:
    # Before: plan said the line without the file, and graph printed the graph (exit 0).
    env = install(tmp_path)
    third_party_team(tmp_path, "myprov:tiny", "{context_window: 2048}")
    for args in (("plan", "team.yaml", "--goal", "Say hello."), ("graph", "team.yaml")):
        done = subprocess.run(
            [sys.executable, "-m", "clearance", *args], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert done.returncode == 2, (args, done.stdout + done.stderr)
        (line,) = (done.stdout + done.stderr).strip().splitlines()
        assert line.startswith(
            "error: team.yaml: model_options.context_window: has no effect on 'myprov:tiny'"
        ), (args, line)
    assert not (tmp_path / "plan.yaml").exists()


def test_a_by_model_window_a_provider_ignores_is_refused(tmp_path: Path) -> None:
    env = install(tmp_path)
    third_party_team(tmp_path, "myprov:tiny", "{by_model: {'myprov:tiny': {context_window: 999}}}")
    code, output = cli(tmp_path, env, "run", "team.yaml")
    assert code == 2, output
    (line,) = [line for line in output.splitlines() if line.startswith("error:")]
    assert line.startswith(
        "error: team.yaml: context_window: has no effect: 'myprov:tiny' was given a "
        "context_window of 999 and keeps its own (4096)"
    ), line
    # graph --estimate makes the model as the run does: it refuses the window too (before:
    # it showed the model's own 4096).
    done = subprocess.run(
        [sys.executable, "-m", "clearance", "graph", "team.yaml", "--estimate"], cwd=tmp_path,
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert line.endswith((done.stdout + done.stderr).strip().removeprefix("error: ")), line


def test_a_by_model_window_a_provider_takes_is_kept(tmp_path: Path) -> None:
    env = install(tmp_path)
    third_party_team(tmp_path, "winprov:w", "{by_model: {'winprov:w': {context_window: 110}}}")
    code, output = cli(tmp_path, env, "run", "team.yaml")
    assert code == 1, output
    assert "task:t: max_prompt_tokens exceeded: 14 > 10" in output, output


# -- chat: the run's budget, and the executor ------------------------------------------------


def test_chat_keeps_to_the_team_files_token_budget(tmp_path: Path) -> None:
    # Before: every message was answered whatever the budget.
    path = fake_team(tmp_path, "model_options: {context_window: 4096}\nbudget: {tokens: 1}\n")
    result = chat(tmp_path, path, "hello\nagain\nand again\n")
    assert result.exit_code == 1, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.output
    assert errors[0].startswith("error: the chat session reached its budget.tokens ("), errors[0]
    assert "used of 1) before a model call; the message was not answered" in errors[0]
    assert "clearance resume" not in result.output  # a chat session is never resumed
    with RunLedger(f"sqlite:///{tmp_path}/r.db") as ledger:
        (record,) = ledger.list_runs()
        calls = ledger.calls(record.run_id)
        assert ledger.get_run(record.run_id).status == "failed"
    assert len(calls) == 1  # the first answer; the second call was never sent


def test_chat_keeps_to_a_cost_budget_in_the_team_files_prices(tmp_path: Path) -> None:
    extra = (
        "model_options: {context_window: 4096}\nbudget: {cost_usd: 0.000001}\n"
        "prices: {'fake:x': {input_per_mtok: 1.0, output_per_mtok: 1.0}}\n"
    )
    result = chat(tmp_path, fake_team(tmp_path, extra), "hello\nagain\n")
    assert result.exit_code == 1, result.output
    assert "error: the chat session reached its budget.cost_usd (" in result.output


def test_chat_refuses_a_cost_budget_without_its_models_price(tmp_path: Path) -> None:
    extra = (
        "model_options: {context_window: 4096}\nbudget: {cost_usd: 1.0}\n"
        "prices: {'fake:x': {input_per_mtok: 1.0, output_per_mtok: 1.0}}\n"
    )
    path = fake_team(tmp_path, extra)
    line = one_line(chat(tmp_path, path, "hello\n", "--model", "fake:y"))
    assert line.startswith(f"error: {path}: prices: a cost budget needs a price"), line
    assert "fake:y" in line, line


def test_chat_refuses_an_executor_it_would_not_use(tmp_path: Path) -> None:
    extra = "model_options: {context_window: 4096}\nexecutor: {kind: ray, workers: 2}\n"
    path = fake_team(tmp_path, extra)
    line = one_line(chat(tmp_path, path, "hello\n"))
    assert line == (
        f"error: {path}: executor: has no effect in clearance chat: a chat turn calls its "
        "model in this process (remove executor, or run the team file)"
    ), line


def test_chat_takes_the_local_executor_it_uses(tmp_path: Path) -> None:
    extra = "model_options: {context_window: 4096}\nexecutor: {kind: local}\n"
    result = chat(tmp_path, fake_team(tmp_path, extra), "hello\n")
    assert result.exit_code == 0, result.output
