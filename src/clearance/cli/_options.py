"""Command-line options that several ``clearance`` commands share."""

from __future__ import annotations

from typing import Annotated

import typer

__all__ = ["DbOption", "InputOption"]

DbOption = Annotated[
    str,
    typer.Option(
        "--db",
        envvar="CLEARANCE_DB",
        help="Ledger database URL (SQLAlchemy form).",
        show_default=True,
    ),
]
InputOption = Annotated[
    str | None,
    typer.Option(
        "--input",
        help="Folder the team's tasks read files from (or python:<package>); "
        "overrides the team file's input.default.",
    ),
]
