"""The store-and-delegation example team, run once on the embedded model."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import ContextStore, Orchestrator, RunLedger, RunOptions, RunServices
from clearance._context.verify import verify_run
from clearance._core.teamfile import load_team_file

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (pip install 'clearance[local]')"
)

pytestmark = pytest.mark.embedded

EXAMPLE = Path(__file__).parents[2] / "examples" / "store_and_delegation.yaml"


async def test_example_runs_on_the_embedded_model(tmp_path: Path) -> None:
    from clearance.models._llama_cpp import LlamaCppModel

    loaded = load_team_file(EXAMPLE)
    model = LlamaCppModel(n_ctx=4096, n_threads=2)
    try:
        with (
            ContextStore(f"sqlite:///{tmp_path / 'store.db'}") as store,
            RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger,
        ):
            orch = Orchestrator(
                loaded.team,
                model=model,
                ledger=ledger,
                store=store,
                options=RunOptions(max_concurrency=1),
                services=RunServices(models={"llama-cpp:smollm2": model}),
            )
            result = await orch.run_tasks(loaded.tasks, goal=loaded.spec.goal)
            records = ledger.tool_calls(result.run_id)
            report = verify_run(ledger, result.run_id)
            stored = store.query("facts")
    finally:
        model.close()

    assert result.status == "completed", result.error
    assert all(o.result for o in result.tasks.values())
    assert report.ok, report.findings
    # The constrained fallback produced real tool calls, each recorded with its result.
    assert records, "the embedded model made no tool call"
    names = {r.name for r in records}
    assert names <= {"store_set", "store_get", "delegate"}
    by_agent = {r.agent for r in records}
    assert by_agent <= {"archivist", "reader", "researcher"}
    # What was written went through the archivist's scoped view.
    assert all(e.agent == "archivist" for e in stored)
