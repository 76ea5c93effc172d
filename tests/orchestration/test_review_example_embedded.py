"""The two-stage review example, run once on the embedded model, verifies."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearance import Orchestrator, RunLedger, RunOptions, RunServices
from clearance._context.verify import verify_run
from clearance._core.teamfile import load_team_file

pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (pip install 'clearance[local]')"
)

pytestmark = pytest.mark.embedded

EXAMPLE = Path(__file__).parents[2] / "examples" / "review_loop.yaml"


async def test_review_example_runs_on_the_embedded_model(tmp_path: Path) -> None:
    from clearance.models._llama_cpp import LlamaCppModel

    loaded = load_team_file(EXAMPLE)
    model = LlamaCppModel(n_ctx=4096, n_threads=2)
    try:
        with RunLedger(f"sqlite:///{tmp_path / 'runs.db'}") as ledger:
            orchestrator = Orchestrator(
                loaded.team, model=model, ledger=ledger,
                options=RunOptions(max_concurrency=1),
                services=RunServices(models={"llama-cpp:smollm2": model}),
            )  # fmt: skip
            result = await orchestrator.run_tasks(loaded.tasks, goal=loaded.spec.goal)
            rounds = ledger.events(result.run_id, "review_round")
            # A small model may send a candidate back; at most three rounds either way.
            assert rounds and max(e.data["round"] for e in rounds) <= 3
            outcome = result.tasks["slugify"]
            assert outcome.status == "completed" or "review.rounds" in (outcome.error or "")
            assert verify_run(ledger, result.run_id).ok
    finally:
        model.close()
