"""The ``clearance`` command: init, run, resume, inspect, verify, graph, runs, view, schema..."""

from __future__ import annotations

import typer

from clearance.cli._approve import register as register_approval_commands
from clearance.cli._chat import register as register_chat_command
from clearance.cli._graph import graph
from clearance.cli._init import register as register_init_command
from clearance.cli._ledger_cmds import inspect, runs, verify
from clearance.cli._memory import register as register_memory_command
from clearance.cli._plan import plan
from clearance.cli._run import resume, run
from clearance.cli._schema import register as register_schema_command
from clearance.cli._store import store_app
from clearance.cli._team_setup import configured_models as _configured_models  # noqa: F401
from clearance.cli._team_setup import team_model_options as _model_options  # noqa: F401
from clearance.cli._view import register as register_view_commands

__all__ = ["app", "main"]

app = typer.Typer(
    name="clearance",
    help="Run teams of LLM agents on a task graph with need-to-know context.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(store_app, name="store")

for command in (run, plan, resume, inspect, verify, graph, runs):
    app.command()(command)
register_view_commands(app)
register_chat_command(app)
register_approval_commands(app)
register_init_command(app)
register_memory_command(app)
register_schema_command(app)


def main() -> None:
    """Entry point of the ``clearance`` command."""
    app()
