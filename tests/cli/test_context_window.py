"""The context window of `openai:` and `anthropic:` models: team file and --context-window."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from clearance._core.teamfile import load_team_file
from clearance.cli import app
from clearance.cli._app import _configured_models, _model_options

runner = CliRunner()

TEAM = """\
model: openai:gpt-4o-mini
{options}
agents: [{{name: a, instructions: You answer., limits: {{max_output_tokens: 100}}}}]
coordinator: {{name: c, instructions: You sum up., limits: {{max_output_tokens: 50}}}}
tasks: [{{id: t, title: T, description: Say hello., assignee: a}}]
"""
# Every agent leaves room for a prompt in a window of 110 tokens (one that leaves none is
# refused before the run: tests/cli/test_model_settings.py).


def team_file(tmp_path, options: str = ""):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(options=options))
    return path


def run(tmp_path, path, *extra: str):
    args = ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db", *extra]
    return runner.invoke(app, args, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})


def test_team_file_window_bounds_the_prompt(tmp_path) -> None:
    result = run(tmp_path, team_file(tmp_path, "model_options: {context_window: 110}"))
    # 110 tokens of window less 100 of output: 10 for the prompt, which is larger.
    assert "max_prompt_tokens exceeded" in result.output
    assert "> 10" in result.output
    assert "model calls: 0" in result.output


def test_cli_window_overrides_the_team_file(tmp_path) -> None:
    path = team_file(tmp_path, "model_options: {context_window: 100000}")
    result = run(tmp_path, path, "--context-window", "110")
    assert "> 10" in result.output
    assert "model calls: 0" in result.output


def test_without_a_window_openai_models_have_none(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    loaded = load_team_file(team_file(tmp_path))
    assert _model_options(loaded, "openai:gpt-4o-mini") == {}
    options = _model_options(loaded, "openai:gpt-4o-mini", context_window=4096)
    models = _configured_models(options)
    assert models["openai:gpt-4o-mini"].context_window == 4096
    # The embedded model is loaded with the window as its n_ctx.
    options = _model_options(loaded, "llama-cpp:smollm2", context_window=4096)
    assert options == {"llama-cpp:smollm2": {"n_ctx": 4096}}


@pytest.mark.parametrize(
    ("options", "reason"),
    [
        ("model_options: {context_window: 0}", "greater than or equal to 1"),
        ("model_options: {context_window: lots}", "context_window"),
        ("model_options: {context_window: true}", "context_window"),
        ("model_options: {window: 5}", "window"),
    ],
)
def test_bad_model_options_are_one_line_errors(tmp_path, options: str, reason: str) -> None:
    result = run(tmp_path, team_file(tmp_path, options))
    assert result.exit_code == 2, result.output
    assert reason in result.output
    assert "Traceback" not in result.output


def test_cli_window_must_be_positive(tmp_path) -> None:
    result = run(tmp_path, team_file(tmp_path), "--context-window", "0")
    assert result.exit_code == 2


def test_graph_estimate_shows_the_configured_window_without_a_key(tmp_path) -> None:
    path = team_file(tmp_path, "model_options: {context_window: 4321}")
    result = runner.invoke(app, ["graph", str(path), "--estimate"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "4321" in result.output
