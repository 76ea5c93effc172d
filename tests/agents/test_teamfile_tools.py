from pathlib import Path

import pytest

from clearance import ConfigError
from clearance._core.teamfile import load_team_file

EXAMPLE = Path(__file__).parents[2] / "examples" / "store_and_delegation.yaml"


def test_example_declares_tools_grants_and_delegation():
    loaded = load_team_file(EXAMPLE)
    archivist = loaded.team.agent("archivist")
    assert archivist.tools == ("store_set",)
    assert archivist.store_grants == {"facts": "write"}
    assert archivist.limits.max_steps == 2 and archivist.limits.answer_at_max_steps
    assert loaded.team.agent("reader").store_grants == {"facts": "read"}
    researcher = loaded.team.agent("researcher")
    assert researcher.can_delegate_to == ("writer",) and researcher.store_grants == {}
    writer = loaded.team.agent("writer")
    assert not writer.uses_tools and writer.store_grants == {}
    assert loaded.spec.store == "sqlite:///.clearance/example-store.db"


def test_bad_grant_level_names_the_field(tmp_path):
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents:\n  - name: a\n    instructions: A.\n    store_grants: {notes: admin}\n",
        encoding="utf-8",
    )
    with pytest.raises(ConfigError, match=r"agents\.0\.store_grants\.notes"):
        load_team_file(path)
