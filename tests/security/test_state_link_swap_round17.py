"""A link swapped in and out around an isolated subagent's ``FILE:`` read: round 17.

An isolated subagent's request was checked for the run's state (Clearance's ``.clearance/``
folder and the run's workspace root) by path before the read and again after it. A link in
the project that led elsewhere at both checks and into the state folder during the read
(swapped in, then back) served another agent's output. The read itself now refuses to enter
a fenced folder, by the identity (device and inode) of each folder it opens: no check of a
path name stands between the decision and the read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from test_workspace_reach_round16 import (  # noqa: F401 (fixture)
    CANARY,
    REFUSAL,
    project,
    rounds_of,
    run,
)

from clearance._core.confined import FencedFolderError, folder_identities, read_bytes_confined
from clearance._orchestration import subagents


def test_a_read_never_enters_a_fenced_folder_through_a_link(tmp_path: Path) -> None:
    root = tmp_path / "root"
    state = root / ".clearance" / "workspaces"
    state.mkdir(parents=True)
    (state / "secret.md").write_text("SECRET")
    (root / "docs").symlink_to(state)
    fence = folder_identities([(root / ".clearance", "state"), (tmp_path / "missing", "gone")])
    assert read_bytes_confined(root, "docs/secret.md", max_bytes=100).data == b"SECRET"
    with pytest.raises(FencedFolderError) as caught:
        read_bytes_confined(root, "docs/secret.md", max_bytes=100, fenced=fence)
    assert (caught.value.path, caught.value.reason) == ("docs/secret.md", "state")
    with pytest.raises(FencedFolderError):  # nor through a link to the file itself
        (root / "note.md").symlink_to(state / "secret.md")
        read_bytes_confined(root, "note.md", max_bytes=100, fenced=fence)
    with pytest.raises(FencedFolderError):  # nor by its own name, in any case the disk folds
        read_bytes_confined(root, ".clearance/workspaces/secret.md", max_bytes=100, fenced=fence)
    (root / "plain.md").write_text("PLAIN")
    assert read_bytes_confined(root, "plain.md", max_bytes=100, fenced=fence).data == b"PLAIN"


@pytest.mark.usefixtures("project")  # the project is the working folder
def test_a_link_swapped_in_only_while_the_file_is_read_serves_nothing(
    tmp_path: Path, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worst moment: a benign link at both path checks, the state's during the read."""
    root = Path.cwd()
    (root / "docs").mkdir()
    (root / "docs" / "secret.md").write_text("benign\n")
    benign = root / "benign"
    (root / "docs").rename(benign)
    (root / "docs").symlink_to(benign)
    real_load = subagents.load_text_file

    def swapping_load(root: Path, rel: str, **kwargs: Any) -> str:
        link = root / "docs"
        link.unlink()
        link.symlink_to(root / "work" / "earlier" / "writer" / "outputs")
        try:
            return real_load(root, rel, **kwargs)
        finally:
            link.unlink()
            link.symlink_to(benign)

    monkeypatch.setattr(subagents, "load_text_file", swapping_load)
    result, seen, db = run(tmp_path, openai_server, monkeypatch, ["docs/secret.md"])
    assert result.exit_code == 0, result.output
    _, rounds = rounds_of(db)
    assert [r["served"] for r in rounds] == [False], rounds
    assert rounds[0]["answer"].endswith(REFUSAL), rounds[0]
    assert not any(CANARY in text for text in seen if "Review the code." in text)
    assert os.path.islink(root / "docs")
