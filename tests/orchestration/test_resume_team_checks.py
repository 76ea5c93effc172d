"""`check_team_file`: an agent's ``model`` in the team file given to resume.

The run resumes with the models it recorded, so a team file naming another model for an
agent is refused. A run started with ``--model`` records no model for its agents: the team
file's then cannot be compared, and is accepted.
"""

import pytest

from clearance import ConfigError, RunSpec
from clearance._orchestration.resume_checks import check_team_file


def spec(model: str | None) -> RunSpec:
    agent = {"name": "alpha", "instructions": "You are Alpha."}
    if model is not None:
        agent["model"] = model
    task = {"id": "t0", "title": "T", "description": "Do it.", "assignee": "alpha"}
    return RunSpec.model_validate({"name": "m", "agents": [agent], "tasks": [task]})


def test_another_model_than_the_recorded_one_is_refused() -> None:
    with pytest.raises(ConfigError) as refused:
        check_team_file(spec("fake:a"), spec("fake:b"))
    assert str(refused.value).startswith('agents.alpha.model: is "fake:b" in the team file, ')
    with pytest.raises(ConfigError, match=r"^agents\.alpha\.model: "):
        check_team_file(spec("fake:a"), spec(None))


def test_a_model_of_a_run_started_with_model_is_not_compared() -> None:
    recorded = spec("fake:a").with_model("fake:m")
    check_team_file(recorded, spec("fake:a"))
    check_team_file(recorded, spec("fake:b"))
    check_team_file(spec("fake:a"), spec("fake:a"))
