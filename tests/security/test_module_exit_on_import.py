"""A tool or step module that calls ``sys.exit`` while imported is a one-line error, exit 2.

The importers caught `Exception`; `SystemExit` is not one, so a module that exits on import
(a script's ``argparse`` run at import time, say) ended ``clearance run`` with the module's
own exit code and no word of why.
"""

from __future__ import annotations

import sys

import pytest
from typer.testing import CliRunner

from clearance.cli import app

TOOL_TEAM = """\
name: t
agents:
  - {name: a, instructions: A., tools: [boom]}
tools:
  boom: {function: "exits_on_import:go"}
tasks:
  - {id: t1, title: T, description: D., assignee: a}
"""

STEP_TEAM = """\
name: s
agents:
  - {name: a, instructions: A.}
tasks:
  - {id: s1, title: S, description: D., run: "python:exits_on_import:go"}
"""


@pytest.mark.parametrize(
    ("team", "field"), [(TOOL_TEAM, "tools.boom"), (STEP_TEAM, "tasks.s1.run")]
)
def test_a_module_that_exits_while_imported_is_a_one_line_error(
    tmp_path, monkeypatch, team, field
) -> None:
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "team.yaml").write_text(team)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "exits_on_import", raising=False)
    result = CliRunner().invoke(
        app, ["run", "team.yaml", "--model", "fake:x", "--db", f"sqlite:///{tmp_path / 'r.db'}"]
    )
    assert result.exit_code == 2, result.output
    (line,) = [ln for ln in result.output.splitlines() if ln.startswith("error:")]
    assert f"{field}: cannot import 'exits_on_import': SystemExit: 3" in line
