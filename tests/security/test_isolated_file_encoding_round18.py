"""An isolated subagent's ``FILE:`` reads a Python module in the encoding it declares.

A task's ``files:`` are read by `text_of`: a ``.py`` file in its PEP 263 coding declaration
(``# -*- coding: latin-1 -*-``), when that encoding reads ASCII as ASCII and makes no
control character of other bytes. An isolated subagent's ``FILE:`` request was read as
UTF-8 only, so the same latin-1 module was read on one path and refused on the other. Both
make the one decision now (`clearance._core.file_text`); a UTF-7 declared module is still
refused, and `load_text_file` keeps its caps, truncation and refusals. Real run, real
ledger; the model is a `FunctionModel` whose prompts are asserted on.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import (
    Agent,
    ConfigError,
    LimitExceeded,
    Orchestrator,
    RunLedger,
    RunOptions,
    Task,
    Team,
)
from clearance._agents.files import FileCaps, load_text_file
from clearance._context.verify import verify_run
from clearance._orchestration.files import text_of
from clearance.models import ModelRequest
from clearance.testing import FunctionModel

LATIN = b"# -*- coding: latin-1 -*-\nGREETING = 'caf\xe9 \xbfqu\xe9 tal?'\n"
UTF7 = b"# coding: utf-7\nNAME = '+ACIAKQ-'  # hidden quotes\n"


async def _ask_for(project: Path, tmp_path: Path, path: str) -> tuple[str, dict, list[str]]:
    """Run one isolated task whose model asks for ``path``: (the prompt that followed the
    request, the clarification round recorded, every isolated prompt's text)."""

    def answer(request: ModelRequest) -> str:
        if request.prompt.manifest.subject != "isolated:t":
            return "S"
        asked = sum(r.prompt.manifest.subject == "isolated:t" for r in model.requests)
        return f"STATUS: needs_context\nFILE: {path}" if asked == 1 else "fine\nSTATUS: done"

    model = FunctionModel(answer)
    team = Team(agents=(Agent(name="worker", instructions="You review code."),),
                coordinator=Agent(name="editor", instructions="You edit."))  # fmt: skip
    with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
        options = RunOptions(input_root=project, clarification_rounds=2,
                             workspace_root=tmp_path / "ws")  # fmt: skip
        orchestrator = Orchestrator(team, model=model, ledger=ledger, options=options)
        result = await orchestrator.run_tasks([
            Task(id="t", title="T", description="Review.", assignee="worker", mode="isolated"),
        ])  # fmt: skip
        assert result.tasks["t"].result == "fine", result.error
        rounds = [e.data for e in ledger.events(result.run_id) if e.kind == "clarification"]
        report = verify_run(ledger, result.run_id)
        assert report.ok, [str(f) for f in report.findings]
    prompts = [r.prompt.text for r in model.requests if r.prompt.manifest.subject == "isolated:t"]
    assert len(prompts) == 2 and len(rounds) == 1
    return prompts[1], rounds[0], prompts


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "greet.py").write_bytes(LATIN)
    (root / "smuggle.py").write_bytes(UTF7)
    return root


async def test_a_latin1_module_asked_for_reaches_the_model_as_its_task_files_read_it(
    project: Path, tmp_path: Path
) -> None:
    after, round_, _ = await _ask_for(project, tmp_path, "greet.py")
    assert round_["served"] is True
    expected = LATIN.decode("latin-1")
    assert text_of("greet.py", LATIN) == expected  # what a task's files: reads
    assert "GREETING = 'café ¿qué tal?'" in after  # the model read the module's own text
    assert expected.strip() in after


async def test_a_utf7_declared_module_is_still_refused_to_the_subagent(
    project: Path, tmp_path: Path
) -> None:
    after, round_, prompts = await _ask_for(project, tmp_path, "smuggle.py")
    assert round_["served"] is False
    assert round_["answer"].endswith(
        "file 'smuggle.py' declares 'utf-7', which does not read ASCII text as ASCII"
    )
    assert all("NAME = '\")" not in text for text in prompts)  # never decoded for a model
    assert round_["answer"] in after  # the model is told why, in one line


def _caps(max_file_bytes: int, on_oversize: str = "truncate") -> FileCaps:
    return FileCaps(max_file_bytes=max_file_bytes, max_total_bytes=10_000,
                    on_oversize=on_oversize)  # type: ignore[arg-type]  # fmt: skip


def test_a_cut_latin1_module_is_cut_in_file_bytes_and_keeps_its_caps(tmp_path: Path) -> None:
    data = b"# coding: latin-1\n" + b"\xe9" * 300 + b"\n"
    (tmp_path / "long.py").write_bytes(data)
    text = load_text_file(tmp_path, "long.py", caps=_caps(200), budget=10_000)
    head, marker = text.split("\n[clearance: truncated long.py: showing the first ", 1)
    kept = int(marker.split(" ")[0])
    assert head == data[:kept].decode("latin-1") and "\xe9" in head
    assert marker.endswith(f"of {len(data)} bytes]")
    with pytest.raises(LimitExceeded, match="max_file_bytes"):
        load_text_file(tmp_path, "long.py", caps=_caps(200, "error"), budget=10_000)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"# coding: latin-1\n\x00x = 1\n", "is binary; only text files are given to agents"),
        (b"# coding: utf-7\nx = 1\n", "declares 'utf-7', which does not read ASCII text as ASCII"),
        (b"# coding: klingon\nx = 1\n", "declares an encoding Python does not know: 'klingon'"),
        (b"# coding: utf-16\nx = 1\n", "declares 'utf-16', which does not read ASCII text as"),
        (b"# coding: cp1252\nx = '\x81'\n", "is not cp1252 text, as its coding declaration"),
        (b"\xef\xbb\xbf# coding: latin-1\nx = 1\n",
         "starts with a UTF-8 byte order mark but declares another encoding"),
    ],
)  # fmt: skip
def test_what_the_files_step_refuses_a_file_request_refuses_too(
    tmp_path: Path, data: bytes, says: str
) -> None:
    (tmp_path / "m.py").write_bytes(data)
    with pytest.raises(ConfigError) as info:
        load_text_file(tmp_path, "m.py", caps=_caps(10_000), budget=10_000)
    assert says in str(info.value) and "\n" not in str(info.value)
