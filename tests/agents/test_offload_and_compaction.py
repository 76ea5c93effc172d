from pathlib import Path

from clearance import Agent, ContextBuilder
from clearance._core.prompt import sha256_text
from clearance.subagents import (
    AgentSession,
    DataOffloader,
    IsolatedContext,
    StepCompactor,
    Workspace,
)


def test_small_outputs_stay_in_the_context(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "a")
    out = DataOffloader(ws).offload("three files")
    assert out.text == "three files" and not out.offloaded
    assert ws.outputs() == ()


def test_large_outputs_are_offloaded_content_addressed_with_preview(tmp_path: Path) -> None:
    ws = Workspace(tmp_path / "a")
    offloader = DataOffloader(ws, max_chars=500, max_lines=20, preview_lines=3)
    big = "\n".join(f"row {i}: {'v' * 40}" for i in range(1000))
    out = offloader.offload(big, label="grep")
    assert out.offloaded and out.reference == f"outputs/{sha256_text(big)}.txt"
    assert ws.read_text(out.reference) == big
    assert out.text.startswith("row 0:") and "row 2:" in out.text and "row 3:" not in out.text
    assert f"[grep: {len(big)} chars, 1000 lines;" in out.text and out.reference in out.text
    assert len(out.text) <= offloader.max_context_chars
    # Many lines but few characters are offloaded too; identical outputs are stored once.
    many_lines = "x\n" * 30
    assert offloader.offload(many_lines).offloaded
    offloader.offload(big)
    assert len(ws.outputs()) == 2


def test_compaction_keeps_recent_verbatim_folds_older_and_keeps_failures(tmp_path: Path) -> None:
    session = AgentSession("a", base_dir=tmp_path, goal="Find the config loader.")
    for i in range(1, 300):
        if i % 50 == 0:
            session.record_step("tool", f"read_file failed: FAILURE-{i}", ok=False)
        else:
            session.record_step("tool" if i % 3 else "model", f"output {i} " + "z" * 500)
    compactor = StepCompactor(keep_recent=4, max_step_chars=1000)
    text = compactor.compact(session.steps)
    kinds = {s.kind for s in session.steps}
    older_failures = sum(not s.ok for s in session.steps[:-4])
    assert len(text) <= compactor.bound(len(kinds), older_failures)
    assert len(text) < 7000  # the bound stated for this history, vs ~150 KB uncompacted
    for i in (50, 100, 150, 200, 250):
        assert f"FAILED step {i + 1} (tool): read_file failed: FAILURE-{i}" in text
    assert "- 1 goal step(s): 1" in text
    assert "model step(s): 4,7,10" in text
    for step in session.steps[-4:]:
        assert step.content in text  # recent steps verbatim
    assert "output 10 " not in text  # old successful output folded away


def test_prompt_with_offloaded_outputs_and_compacted_history_stays_bounded(
    tmp_path: Path,
) -> None:
    agent = Agent(name="a", instructions="You investigate.")
    session = AgentSession("a", base_dir=tmp_path, goal="Investigate.")
    offloader = DataOffloader(session.workspace, max_chars=1000)
    compactor = StepCompactor(keep_recent=3, max_step_chars=1200)
    builder = ContextBuilder(count_tokens=lambda t: len(t) // 4)
    sizes = []
    for i in range(120):
        raw = f"tool output {i}\n" + "data line\n" * (50 + i * 10)
        session.record_step("tool", offloader.offload(raw).text, ok=i % 40 != 39)
        context = IsolatedContext(task_id="inv", task_description="Investigate.",
                                  history=compactor.compact(session.steps))  # fmt: skip
        sizes.append(builder.build_isolated_prompt(context, agent=agent).manifest.total_tokens)
    assert max(sizes) < 2500  # tokens, while the raw outputs total ~0.8 MB
    assert sizes[-1] < sizes[50] * 1.5  # flat, not growing with the number of steps
    final = compactor.compact(session.steps)
    assert final.count("FAILED step") == 2  # older failures at i = 39, 79
    assert "tool FAILED" in final  # i = 119, among the recent steps
