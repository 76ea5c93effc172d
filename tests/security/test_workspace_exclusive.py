"""Item 3: a workspace is created fresh, so an agent never lands in another agent's folder."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from clearance import ConfigError
from clearance.subagents import AgentSession, Workspace


def test_a_child_cannot_land_in_another_agents_folder_with_an_empty_history(
    tmp_path: Path, canary: str
) -> None:
    victim = AgentSession("victim", base_dir=tmp_path)  # no goal: its history/ is empty
    victim.write_output("findings.md", f"private {canary}")
    assert list(victim.workspace.history_dir.iterdir()) == []
    parent = AgentSession("lead", base_dir=tmp_path, goal="Plan.")
    with pytest.raises(ConfigError, match="already exists") as info:
        parent.spawn_child("victim", "Read what is in your outputs.")
    assert "\n" not in str(info.value)
    assert [s.kind for s in parent.steps] == ["goal"]  # no spawn was recorded
    assert list(victim.workspace.history_dir.iterdir()) == []  # nothing written into it
    assert victim.workspace.outputs() == ("findings.md",)


@pytest.mark.parametrize("planted", ["empty folder", "file", "link to a folder"])
def test_anything_already_at_the_folder_refuses_the_workspace(planted: str, tmp_path: Path) -> None:
    target = tmp_path / "agents" / "child"
    target.parent.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if planted == "empty folder":
        target.mkdir()
    elif planted == "file":
        target.write_text("x")
    else:
        target.symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="already exists"):
        Workspace(target)
    with pytest.raises(ConfigError, match="already exists"):
        AgentSession("child", base_dir=tmp_path / "agents")
    assert list(elsewhere.iterdir()) == []  # nothing was created through the link


def test_two_agents_racing_for_one_folder_get_one_each_at_most(tmp_path: Path) -> None:
    winners: list[Workspace] = []
    losers: list[ConfigError] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        try:
            winners.append(Workspace(tmp_path / "shared"))
        except ConfigError as exc:
            losers.append(exc)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert len(winners) == 1 and len(losers) == 7
