"""``clearance view`` (one run as an HTML file) and ``clearance serve`` (every run, locally)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from clearance import ConfigError
from clearance.cli._common import (
    check_output_files,
    err,
    one_line_errors,
    out,
    safe_text,
    write_output_file,
)
from clearance.cli._options import RunIdArgument
from clearance.runs import DEFAULT_LEDGER_URL

__all__ = ["register"]

DbOption = Annotated[
    str,
    typer.Option("--db", envvar="CLEARANCE_DB", help="Ledger database URL (SQLAlchemy form)."),
]


@one_line_errors
def view(
    run_id: RunIdArgument,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="HTML file to write (default: <run id>.html here)."),
    ] = None,
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """Write one run as a self-contained HTML page: graph, prompts by origin, verify verdict."""
    from clearance import RunLedger
    from clearance.view import load_run_view, render_run_page  # Jinja2: for this command only

    with RunLedger(db, read_only=True) as ledger:
        run_view = load_run_view(ledger, run_id)
    page = render_run_page(run_view)
    target = output if output is not None else _default_target(run_view.run.run_id)
    check_output_files({"--output": target})
    write_output_file(target, page, flag="--output")
    out.print(safe_text(f"wrote {target} (run {run_view.run.run_id}); open it in a browser"))


_PLAIN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,200}")


def _default_target(run_id: str) -> Path:
    """``<run id>.html`` in the current folder, for a run id that is a plain file name.

    A plain file name: letters, digits, ``_``, ``.`` and ``-``, not starting with ``.`` or
    ``-``, at most 201 characters (``run_0193c1a2b3c4_9f2e4d1a`` is one). The run id comes
    from the ledger, which is not trusted: ``../../x`` or ``/home/me/x`` would put the page
    anywhere. Such an id is refused; the user names the file instead.

    Raises:
        ConfigError: The run id is not a plain file name (``field`` is ``--output``).
    """
    if not _PLAIN_NAME.fullmatch(run_id):
        raise ConfigError(
            f"run id {run_id[:80]!r} is not a plain file name to name the page after; "
            "give --output",
            field="--output",
        )
    return Path(f"{run_id}.html")


@one_line_errors
def serve(
    port: Annotated[
        int, typer.Option("--port", min=0, max=65535, help="TCP port on 127.0.0.1 (0: any free).")
    ] = 8765,
    db: DbOption = DEFAULT_LEDGER_URL,
) -> None:
    """Serve every run of a ledger as HTML pages on 127.0.0.1, with a list of runs."""
    from clearance import RunLedger
    from clearance.view import make_server  # Jinja2: for this command only

    with RunLedger(db, read_only=True) as ledger:
        try:
            server = make_server(ledger, port)
        except OSError as exc:
            raise ConfigError(
                f"cannot listen on 127.0.0.1:{port}: {exc.strerror}", field="--port"
            ) from None
        out.print(safe_text(f"serving the runs of the ledger at {server.url} (Ctrl-C to stop)"))
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            err.print("stopped")
        finally:
            server.server_close()


def register(app: typer.Typer) -> None:
    """Add ``view`` and ``serve`` to the ``clearance`` command."""
    app.command()(view)
    app.command()(serve)
