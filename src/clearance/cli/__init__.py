"""The ``clearance`` command-line tool (typer + rich). The library never imports it."""

from clearance.cli._app import app, main

__all__ = ["app", "main"]
