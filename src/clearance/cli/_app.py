"""The ``clearance`` command: init, run, resume, inspect, verify, graph, runs, view, schema..."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from typer.core import TyperGroup

try:  # Typer 0.2x runs on its own copy of Click, whose errors are these
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - an older Typer, on Click itself
    from click import exceptions as click_errors  # type: ignore[no-redef]

from clearance.cli._approve import register as register_approval_commands
from clearance.cli._chat import register as register_chat_command
from clearance.cli._common import safe
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


class _OneLineUsageErrors(TyperGroup):
    """The command group, with a usage error as one line on stderr and exit code 2.

    A bad option value, an unknown option or a missing argument is bad input like any other:
    ``error: Invalid value for '--limit': ... (see clearance runs --help)``, not Click's
    usage box.
    """

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, windows_expand_args, **extra)
        except click_errors.NoArgsIsHelpError as exc:  # the help, asked for by no arguments
            exc.show()
            sys.exit(exc.exit_code)
        except click_errors.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "clearance"
            message = " ".join(exc.format_message().split())
            typer.echo(safe(f"error: {message} (see {where} --help)"), err=True)
            sys.exit(exc.exit_code)
        except click_errors.ClickException as exc:
            typer.echo(safe(f"error: {' '.join(exc.format_message().split())}"), err=True)
            sys.exit(exc.exit_code)
        except typer.Abort:
            typer.echo("Aborted!", err=True)
            sys.exit(1)
        except OSError as exc:
            if exc.errno not in _OUTPUT_LOST:
                raise
            _output_lost(exc)
        sys.exit(code if isinstance(code, int) else 0)


_OUTPUT_LOST = {errno.EPIPE, errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}
"""Why the command's output could not be written (to a full disk, a closed pipe...)."""


def _output_lost(exc: OSError) -> NoReturn:
    """End a command whose output could not be written: one line on stderr, no traceback.

    What the command wrote to its database or files is kept (the output comes last). A
    reader that went away (``clearance runs | head``) is not an error to report: exit 1,
    silently, as rich does. Standard output is pointed at ``/dev/null`` first, so Python's
    final flush of the text still buffered fails no second time.
    """
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    if exc.errno == errno.EPIPE:
        sys.exit(1)
    with contextlib.suppress(OSError):
        typer.echo(f"error: cannot write the output: {exc.strerror or exc}", err=True)
    sys.exit(2)


app = typer.Typer(
    cls=_OneLineUsageErrors,
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
    """Entry point of the ``clearance`` command.

    Text the output's encoding cannot hold (a file name that is not UTF-8, any non-ASCII
    text under ``PYTHONIOENCODING=ascii``) is written as backslash escapes, not refused
    with a traceback.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError):  # not a text file: as it is
            stream.reconfigure(errors="backslashreplace")  # type: ignore[union-attr]
    app()
