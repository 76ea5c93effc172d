"""``clearance graph --estimate`` takes each model's window from the settings ``run`` uses.

It made the team's models from the team-wide ``model_options.context_window`` alone, so a
window ``model_options.by_model`` gives one model was never shown: the estimate showed the
model's default window (or none) and a budget the run would not apply. And ``graph`` and
``plan`` let a ``model_options`` key that ``run`` refuses through (graph printed the graph;
plan refused it without naming the file).
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from clearance.cli import app

runner = CliRunner()

AGENT = "{name: a, instructions: You answer., limits: {max_output_tokens: 100}}"
COORDINATOR = "{name: c, instructions: You sum up., limits: {max_output_tokens: 50}}"


def team(tmp_path: Path, model: str, options: str, extra: str = "") -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(
        f"model: {model}\nmodel_options: {options}\n{extra}agents: [{AGENT}]\n"
        f"coordinator: {COORDINATOR}\n"
        "tasks: [{id: t, title: T, description: Say hello., assignee: a}]\n"
    )
    return path


def estimate_row(path: Path) -> list[str]:
    result = runner.invoke(
        app, ["graph", str(path), "--estimate"], terminal_width=200, env={"OPENAI_API_KEY": ""}
    )
    assert result.exit_code == 0, result.output
    (row,) = [line for line in result.output.splitlines() if line.startswith("│ t ")]
    return [cell.strip() for cell in row.strip("│").split("│")]


def test_a_by_model_window_of_the_embedded_model_is_the_one_shown(tmp_path: Path) -> None:
    # Before: 8192, the model's default, while the run made it with n_ctx 2048.
    path = team(tmp_path, "llama-cpp:smollm2", "{by_model: {'llama-cpp:smollm2': {n_ctx: 2048}}}")
    _, _, budget, window, verdict = estimate_row(path)
    assert (window, verdict) == ("2048", "ok")
    assert int(budget) <= 2048 - 100  # less its max_output_tokens (and any chat template)


def test_a_by_model_window_wins_over_the_team_wide_one(tmp_path: Path) -> None:
    options = "{context_window: 4096, by_model: {'fake:x': {context_window: 300}}}"
    _, _, budget, window, _ = estimate_row(team(tmp_path, "fake:x", options))
    assert (window, budget) == ("300", "200")


def test_a_by_model_window_of_a_served_model_needs_no_key(tmp_path: Path) -> None:
    # Before: "?" (the model was made without its settings).
    options = "{by_model: {'openai:gpt-4o-mini': {context_window: 1500}}}"
    _, _, budget, window, _ = estimate_row(team(tmp_path, "openai:gpt-4o-mini", options))
    assert (window, budget) == ("1500", "1400")


def test_the_estimated_budget_is_the_one_the_run_applies(tmp_path: Path) -> None:
    # A window of 110 leaves 10 tokens for the prompt: the estimate says so, the run too.
    path = team(tmp_path, "fake:x", "{by_model: {'fake:x': {context_window: 110}}}")
    result = runner.invoke(app, ["graph", str(path), "--estimate"], terminal_width=200)
    assert result.exit_code == 1, result.output
    assert "OVER BUDGET" in result.output
    (row,) = [line for line in result.output.splitlines() if line.startswith("│ t ")]
    assert [c.strip() for c in row.strip("│").split("│")][2:4] == ["10", "110"]
    ran = runner.invoke(app, ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db"])
    assert "max_prompt_tokens exceeded" in ran.output and "> 10" in ran.output, ran.output


def one_error(output: str) -> str:
    assert "Traceback" not in output
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    return lines[0]


REFUSED = "model_options.threads: applies to llama-cpp: models only, and no agent uses one"


def test_graph_and_plan_refuse_a_model_option_as_run_does_naming_the_file(
    tmp_path: Path,
) -> None:
    # Before: graph printed the graph (exit 0), plan said the line without the file.
    path = team(tmp_path, "fake:x", "{threads: 2}", extra="goal: Say hello.\n")
    db = f"sqlite:///{tmp_path}/r.db"
    expected = f"error: {path}: {REFUSED}"
    for args in (
        ["run", str(path), "--db", db],
        ["graph", str(path)],
        ["graph", str(path), "--estimate"],
        ["plan", str(path), "--db", db, "--output", str(tmp_path / "plan.yaml")],
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert one_error(result.output) == expected, args
    assert not (tmp_path / "plan.yaml").exists()
    assert not (tmp_path / "r.db").exists()  # refused before any ledger was opened


NO_KEY = (
    "api_key: no API key for OpenAI: set OPENAI_API_KEY, pass api_key=..., or point base_url "
    "(or OPENAI_BASE_URL) at an OpenAI-compatible server"
)


def test_plan_says_a_model_that_cannot_be_made_of_the_team_file(tmp_path: Path) -> None:
    # Before: plan said the line without the file; run named it.
    path = team(tmp_path, "openai:gpt-4o-mini", "{}", extra="goal: Say hello.\n")
    db = f"sqlite:///{tmp_path}/r.db"
    args = ["plan", str(path), "--db", db, "--output", str(tmp_path / "plan.yaml")]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert one_error(result.output) == f"error: {path}: {NO_KEY}"
    ran = runner.invoke(app, ["run", str(path), "--db", db])
    assert f"error: {path}: {NO_KEY}" in ran.output, ran.output


def test_plan_says_a_model_given_with_model_was_given_there(tmp_path: Path) -> None:
    path = team(tmp_path, "fake:x", "{}", extra="goal: Say hello.\n")
    args = [
        "plan",
        str(path),
        "--model",
        "openai:gpt-4o-mini",
        "--db",
        f"sqlite:///{tmp_path}/r.db",
    ]
    result = runner.invoke(app, [*args, "--output", str(tmp_path / "plan.yaml")])
    assert result.exit_code == 2, result.output
    assert one_error(result.output) == f"error: --model: {NO_KEY}"


def test_plan_names_the_file_of_a_window_with_no_room_for_the_plan(tmp_path: Path) -> None:
    # A window of 100 tokens, all of them reserved for agent a's answer: refused before planning.
    path = team(tmp_path, "fake:x", "{context_window: 100}", extra="goal: Say hello.\n")
    db = f"sqlite:///{tmp_path}/r.db"
    result = runner.invoke(app, ["plan", str(path), "--db", db, "-o", str(tmp_path / "p.yaml")])
    assert result.exit_code == 2, result.output
    line = one_error(result.output)
    assert line.startswith(f"error: {path}: context_window: a context window of 100 tokens "), line
    ran = runner.invoke(app, ["run", str(path), "--db", db])
    assert line in ran.output, ran.output
