"""The approval tests' team: a janitor whose one tool, ``remove``, waits for a person.

``from janitor import ...`` works from every test folder (``tests/`` is on the path, as the
folder of the root ``conftest.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from clearance import Agent, Orchestrator, RunLedger, RunOptions, RunServices, Task, Team
from clearance.models import ToolCall
from clearance.testing import FunctionModel

TEAM = Team(
    agents=(Agent(name="janitor", instructions="You tidy up.", tools=("remove",)),),
    coordinator=Agent(name="editor", instructions="You edit."),
)
TASK = Task(id="tidy", title="Tidy", description="Delete old.txt.", assignee="janitor")


def removing(path: str) -> Callable[[Any], Any]:
    """A model that asks to ``remove(path)`` in task ``tidy``, then ends once answered."""

    def reply(request: Any) -> Any:
        if request.prompt.manifest.subject != "task:tidy":
            return "SYNTH"
        text = request.prompt.text
        if "denied this call" in text or "REMOVED" in text:
            return "done"
        return ToolCall(id="c1", name="remove", arguments={"path": path})

    return reply


def janitor(
    ledger: RunLedger, tmp_path: Path, ran: list[str], *, path: str, approver: Any = None
) -> Orchestrator:
    """The team on `removing` ``path``, ``remove`` gated; each removal is appended to ``ran``."""

    def remove(path: str) -> str:
        """Remove a file."""
        ran.append(path)
        return f"REMOVED {path}"

    return Orchestrator(
        TEAM, model=FunctionModel(removing(path)), ledger=ledger, tools={"remove": remove},
        options=RunOptions(approval_tools=["remove"], workspace_root=tmp_path / "ws"),
        services=RunServices(approver=approver),
    )  # fmt: skip
