"""The fan-out research example, once with fakes (fast) and once on the embedded model."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from clearance.models import ModelRequest
from clearance.testing import FunctionModel

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fanout_research.py"


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fanout_research", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["fanout_research"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "guide.md").write_text("# Guide\n\nAgents see only their own task. DOC-GUIDE\n")
    (folder / "faq.md").write_text("# FAQ\n\nThe ledger records every prompt. DOC-FAQ\n")
    return folder


async def test_children_are_isolated_and_the_parent_sees_only_the_aggregate(
    docs: Path, tmp_path: Path
) -> None:
    example = load_example()

    def answer(request: ModelRequest) -> str:
        user = request.prompt.messages[1].content
        if "Your aspect" in user:
            aspect = next(a for a in example.ASPECTS if example.ASPECTS[a] in user)
            return f"- Shared finding.\n- Finding about {aspect}.\nSTATUS: done"
        return "Synthesis from the findings.\nSTATUS: done"

    model = FunctionModel(answer)
    report = await example.research(docs, "How are agents kept apart?", model=model,
                                    workdir=tmp_path / "agents")  # fmt: skip
    child_prompts = [r.prompt for r in model.requests[:3]]
    for prompt in child_prompts:
        text = prompt.text
        assert "DOC-GUIDE" in text and "DOC-FAQ" in text  # file contents, not paths
        own = [a for a in example.ASPECTS if example.ASPECTS[a] in text]
        assert len(own) == 1  # one aspect each, nothing about siblings
        siblings = [f"child-{a}" for a in example.ASPECTS if a != own[0]]
        assert f"child-{own[0]}" in text and not any(s in text for s in siblings)
    assert report.aggregate.complete
    shared = report.aggregate.findings[0]
    assert shared.text == "Shared finding." and len(shared.child_ids) == 3
    parent_prompt = model.requests[3].prompt
    assert parent_prompt.manifest.origins == ("instructions", "arch", "task:synthesis",
                                              "child_result:aggregate")  # fmt: skip
    assert "DOC-GUIDE" not in parent_prompt.text  # the parent never reads the files
    assert report.synthesis.result == "Synthesis from the findings."
    assert [s.kind for s in report.parent.steps].count("spawn") == 3
    assert report.parent.result == "Synthesis from the findings."


@pytest.mark.embedded
def test_runs_on_the_embedded_model(tmp_path: Path) -> None:
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    import asyncio

    from clearance.models._llama_cpp import LlamaCppModel

    example = load_example()
    model = LlamaCppModel(n_ctx=4096, n_threads=2)
    try:
        report = asyncio.run(example.research(example.DEFAULT_INPUT, example.DEFAULT_QUESTION,
                                              model=model, workdir=tmp_path))  # fmt: skip
    finally:
        model.close()
    assert len(report.aggregate.outcomes) == 3
    assert report.aggregate.complete, report.aggregate.combined_text()
    assert report.aggregate.findings
    assert report.synthesis.result.strip()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "child-limits",
        "child-mechanisms",
        "child-purpose",
        "lead",
    ]
