"""Command-line options that several ``clearance`` commands share."""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from clearance import ConfigError

__all__ = [
    "DbOption",
    "RunIdArgument",
    "InputOption",
    "check_database_folder",
    "check_store_and_memory",
    "concurrency_option",
    "model_id_option",
    "not_empty",
    "number_option",
    "utf8_text",
]


def number_option(
    least: float, most: float | None = None
) -> Callable[[float | None], float | None]:
    """A float option's check: a finite number from ``least`` to ``most`` (if given).

    Typer's own ``min``/``max`` let infinity through where there is no bound, and answer NaN
    with a message about the bound; this names what was given.

    Raises:
        typer.BadParameter: (from the returned check) The value is NaN, infinite or out of
            range (a one-line usage error, exit 2).
    """

    def check(value: float | None) -> float | None:
        if value is None:
            return None
        if not math.isfinite(value):
            raise typer.BadParameter(f"must be a finite number, got {value}")
        if most is None and value < least:
            raise typer.BadParameter(f"must be at least {least:,.10g}, got {value:,.10g}")
        if most is not None and not least <= value <= most:
            raise typer.BadParameter(
                f"must be from {least:,.10g} to {most:,.10g}, got {value:,.10g}"
            )
        return value

    return check


def model_id_option(value: str | None) -> str | None:
    """``--model``'s check: a model id (``provider:name``), as a team file's ``model:`` is.

    ``--model ""`` was taken as no option at all, and the run went on the default model.

    Raises:
        typer.BadParameter: The value is not a model id (a one-line usage error, exit 2).
    """
    from clearance.runs import check_model_id

    if value is None:
        return None
    try:
        return check_model_id(value)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def concurrency_option(value: int | None) -> int | None:
    """``--max-concurrency``'s check: 1 to `MAX_CONCURRENCY`, as in a team file.

    Raises:
        typer.BadParameter: Out of range (a one-line usage error, exit 2).
    """
    from clearance.runs import MAX_CONCURRENCY

    if value is not None and not 1 <= value <= MAX_CONCURRENCY:
        raise typer.BadParameter(f"must be 1 to {MAX_CONCURRENCY}, got {value}")
    return value


def not_empty(value: str | None) -> str | None:
    """The check of an option naming a folder or a database: an empty value is a mistake.

    Raises:
        typer.BadParameter: The value is empty or blank (a one-line usage error, exit 2).
    """
    if value is not None and not value.strip():
        raise typer.BadParameter("is empty")
    return value


def utf8_text(value: str | None) -> str | None:
    """The check of a run id or a goal given on the command line: UTF-8 text.

    Arguments reach Python as the bytes the shell passed; bytes that are not UTF-8 become
    lone surrogates, which no database, model or file can take (the ledger's driver
    raised a traceback on them).

    Raises:
        typer.BadParameter: The value is not UTF-8 text (a one-line usage error, exit 2).
    """
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise typer.BadParameter(f"{value!r} is not UTF-8 text") from None
    return value


RunIdArgument = Annotated[
    str, typer.Argument(callback=utf8_text, help="Run id (or a unique prefix).")
]


def answer_timeout_option(value: float | None) -> float | None:
    """``--answer-timeout``'s check: seconds above 0 and at most a day."""
    if value is None:
        return None
    from clearance import ConfigError
    from clearance.runs import check_answer_timeout

    try:
        return check_answer_timeout(value)
    except ConfigError as exc:
        raise typer.BadParameter(str(exc).removeprefix("answer_timeout_s: ")) from None


AnswerTimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--answer-timeout",
        callback=answer_timeout_option,
        metavar="SECONDS",
        help="With --interactive: how long to wait for your answer to one approval or "
        "question (default 3600). Past it the approval stays open (the run pauses it) and "
        "the question gets no answer.",
    ),
]
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
        callback=not_empty,
        help="Folder the team's tasks read files from (or python:<package>); "
        "overrides the team file's input.default.",
    ),
]


def check_database_folder(url: str, *, default: str, flag: str = "--db") -> None:
    """Refuse a database URL given by the user that would not keep what is written to it.

    A command that may create a database (``run``, ``resume``, ``chat``, ``plan``,
    ``store set``) creates the folder of its default one (``.clearance/``); a folder the
    user named is never created, as for the output files (``--output``, ``--json``): a
    mistyped path is said in one line instead of becoming a new folder and an empty
    database. An in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``) is
    refused too: what the command writes would be gone when it ends.

    Args:
        url: The URL given (``sqlite:///path``...); not SQLite: nothing to check.
        default: The option's default URL; a database in its folder is accepted (the
            folder is created). ``""`` for none.
        flag: The option, for the error.

    Raises:
        ConfigError: The folder does not exist, or the database is in memory (``field``
            is ``flag``).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    from clearance.runs import sqlite_file_path

    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return  # opening it names the bad URL
    if parsed.get_backend_name() != "sqlite":
        return
    try:
        path = sqlite_file_path(parsed)
    except ValueError:
        return  # opening it names the bad argument
    if path is None:
        raise ConfigError(
            "an in-memory SQLite database keeps nothing once the command ends; "
            "give a file (sqlite:///path)",
            field=flag,
        )
    if "\x00" in path:
        return  # opening it names the NUL character
    folder = Path(path).parent
    default_path = sqlite_file_path(default) if default else None
    with contextlib.suppress(OSError):  # a name the system refuses: said below
        if default_path is not None and folder.resolve() == Path(default_path).parent.resolve():
            return
    if not os.path.isdir(folder):  # False for a name too long too
        raise ConfigError(f"folder {str(folder)!r} does not exist", field=flag)


def check_store_and_memory(store: str | None, memory: str | None) -> None:
    """`check_database_folder` for ``--store`` and ``--memory`` (``run``, ``resume``).

    A store in the default store's folder (``.clearance/``) is accepted: that folder is
    created.

    Raises:
        ConfigError: As `check_database_folder` (``field`` is the option).
    """
    from clearance.runs import DEFAULT_LEDGER_URL, DEFAULT_STORE_URL

    if store is not None:
        check_database_folder(store, default=DEFAULT_STORE_URL, flag="--store")
    if memory is not None:
        check_database_folder(memory, default=DEFAULT_LEDGER_URL, flag="--memory")
