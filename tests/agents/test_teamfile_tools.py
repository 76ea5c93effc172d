from pathlib import Path

import pytest

from clearance import ConfigError
from clearance._core.teamfile import load_team_file

EXAMPLE = Path(__file__).parents[2] / "examples" / "store_and_delegation.yaml"


def test_example_declares_tools_grants_and_delegation():
    loaded = load_team_file(EXAMPLE)
    researcher = loaded.team.agent("researcher")
    assert researcher.tools == ("store_set", "store_get")
    assert researcher.can_delegate_to == ("writer",)
    assert researcher.store_grants == {"facts": "read_write"}
    assert researcher.limits.max_steps == 6
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
