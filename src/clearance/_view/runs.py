"""The list of runs: each run's status, wall time and ``verify`` verdict, with a cache.

Verifying a run re-reads all of its records, so the list does not verify every run on every
load. `VerdictCache` keeps each run's verdict with the run's chain head
(`RunLedger.chain_heads`, one query for the whole list): a verdict is reused as long as the
run has no new record, and at most ``max_per_request`` runs are verified per list, newest
first; the others say "not checked yet" until a later load reaches them. A run still going
is not verified (its verdict would be stale at the next record); its page verifies it. A run
recorded running whose process is gone is not going: it is listed ``running (process gone)``
(`shown_status`, as ``clearance runs`` lists it) and verified as it stands.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from clearance._context.verify import verify_run
from clearance._core.errors import ClearanceError
from clearance._orchestration.resume import shown_status
from clearance._state.ledger import RunLedger, RunRecord
from clearance._view.checked import run_tokens
from clearance._view.model import RunView

__all__ = ["RunRow", "Verdict", "VerdictCache"]

VerdictState = Literal["ok", "bad", "error", "running", "unchecked"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """What ``verify`` said of a run, in a word and a line.

    Attributes:
        state: ``ok`` (nothing found), ``bad`` (findings), ``error`` (verify could not
            run), ``running`` (not verified while the run goes on), ``unchecked`` (not
            verified yet: over this load's budget).
        text: The line the list shows, raw.
    """

    state: VerdictState
    text: str


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRow:
    """One line of the list of runs.

    Attributes:
        run: The run's record.
        verdict: Its ``verify`` verdict.
        status: Its status as listed (`shown_status`): ``running (process gone)`` for a run
            recorded running whose process is gone, else as recorded.
    """

    run: RunRecord
    verdict: Verdict
    status: str

    @property
    def process_gone(self) -> bool:
        """Whether it is recorded running but its process is gone (`status` says so)."""
        return self.status != self.run.status

    @property
    def duration_s(self) -> float | None:
        """Wall time from the run's start to its finish, or ``None`` while it runs."""
        if self.run.finished_at is None:
            return None
        return max(0.0, (self.run.finished_at - self.run.created_at).total_seconds())

    @property
    def tokens(self) -> int | None:
        """Prompt plus completion tokens of the run, or ``None`` while it runs.

        The run's usage total is written when it finishes; until then it would read 0. Also
        ``None`` when the recorded counts are not whole numbers (`run_tokens`).
        """
        return run_tokens(self.run)


_TEXT_CHARS = 1000  # of a verdict's line
_RUNNING = Verdict(state="running", text="when the run has finished")
_UNCHECKED = Verdict(state="unchecked", text="not checked yet (reload)")


class VerdictCache:
    """Verdicts of runs by run id and chain head (not thread-safe: hold the server's lock).

    Args:
        max_per_request: Most runs `rows` verifies in one call (at least 0).
        max_entries: Most verdicts kept; the oldest kept is dropped first.
    """

    def __init__(self, *, max_per_request: int = 20, max_entries: int = 2000) -> None:
        self.max_per_request = max_per_request
        self.max_entries = max_entries
        self._verdicts: dict[str, tuple[int, Verdict]] = {}
        self.verified = 0
        """How many runs this cache has verified (for tests and curiosity)."""

    def rows(self, ledger: RunLedger, runs: Sequence[RunRecord]) -> list[RunRow]:
        """The list's lines, verifying at most ``max_per_request`` runs not cached yet.

        Args:
            ledger: The ledger the runs are in.
            runs: The runs, in the order listed (newest first: the budget goes to them).

        Returns:
            One row per run, in the same order.

        Raises:
            StoreError: The ledger cannot be read (a failing ``verify`` is a verdict instead).
        """
        heads = ledger.chain_heads([r.run_id for r in runs])
        now = ledger.server_time()
        budget = self.max_per_request
        rows: list[RunRow] = []
        for run in runs:
            head = heads.get(run.run_id, 0)
            cached = self._verdicts.get(run.run_id)
            status = shown_status(run, now=now)
            if run.finished_at is None and status == run.status:  # going (or may be)
                verdict = _RUNNING
            elif cached is not None and cached[0] == head:
                verdict = cached[1]
            elif budget > 0:
                budget -= 1
                verdict = self._verify(ledger, run.run_id)
                self._keep(run.run_id, head, verdict)
            else:
                verdict = _UNCHECKED
            rows.append(RunRow(run=run, verdict=verdict, status=status))
        return rows

    def remember(self, view: RunView) -> None:
        """Keep the verdict a run page computed anyway (`load_run_view` verifies)."""
        if view.live:
            return
        if view.verify_error is not None:
            verdict = Verdict(state="error", text=f"could not check: {view.verify_error}")
        else:
            verdict = _verdict(len(view.findings), view.calls_checked)
        self._keep(view.run.run_id, view.seq, verdict)

    def _verify(self, ledger: RunLedger, run_id: str) -> Verdict:
        self.verified += 1
        try:
            report = verify_run(ledger, run_id)
        except ClearanceError as exc:
            return Verdict(state="error", text=f"could not check: {exc}")
        except Exception as exc:  # a forged row verify did not expect: one run, not the list
            text = f"could not check: a record is malformed ({type(exc).__name__}: {exc})"
            return Verdict(state="error", text=text[:_TEXT_CHARS])
        return _verdict(len(report.findings), report.calls_checked)

    def _keep(self, run_id: str, head: int, verdict: Verdict) -> None:
        self._verdicts.pop(run_id, None)
        self._verdicts[run_id] = (head, verdict)
        while len(self._verdicts) > self.max_entries:
            del self._verdicts[next(iter(self._verdicts))]


def _verdict(findings: int, calls: int) -> Verdict:
    if findings:
        return Verdict(state="bad", text=f"{findings} problem(s) in {calls} model calls")
    return Verdict(state="ok", text=f"{calls} model calls verified")
