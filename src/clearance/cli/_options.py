"""Command-line options that several ``clearance`` commands share."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clearance import ConfigError

__all__ = ["DbOption", "InputOption", "check_database_folder"]

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


def check_database_folder(url: str, *, default: str, flag: str = "--db") -> None:
    """Refuse a database URL given by the user whose SQLite file's folder does not exist.

    A command that may create a database (``run``, ``chat``, ``plan``, ``store set``)
    creates the folder of its default one (``.clearance/``); a folder the user named is
    never created, as for the output files (``--output``, ``--json``): a mistyped path is
    said in one line instead of becoming a new folder and an empty database.

    Args:
        url: The URL given (``sqlite:///path``...); not an SQLite file: nothing to check.
        default: The option's default URL, whose folder is created.
        flag: The option, for the error.

    Raises:
        ConfigError: The folder does not exist (``field`` is ``flag``).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    if url == default:
        return
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return  # opening it names the bad URL
    database = parsed.database or ""
    if parsed.get_backend_name() != "sqlite" or database in ("", ":memory:"):
        return
    if database.startswith("file:") or parsed.query.get("uri"):
        return
    folder = Path(database).parent
    if not folder.is_dir():
        raise ConfigError(f"folder {str(folder)!r} does not exist", field=flag)
