"""``clearance schema``: print the JSON Schema of a team file (or its Markdown reference)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

__all__ = ["register"]

_Markdown = Annotated[
    bool, typer.Option("--markdown", help="Print the Markdown reference instead.")
]


def schema(markdown: _Markdown = False) -> None:
    """Print the JSON Schema of a team file, for editors (yaml-language-server)."""
    from clearance.runs import team_file_markdown, team_file_schema

    text = team_file_markdown() if markdown else json.dumps(team_file_schema(), indent=2)
    typer.echo(text.rstrip("\n"))


def register(app: typer.Typer) -> None:
    """Add ``schema`` to the ``clearance`` command."""
    app.command()(schema)
