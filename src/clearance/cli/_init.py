"""``clearance init``: write a commented starter team file that runs as it is."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path
from typing import Annotated

import typer

from clearance import ConfigError
from clearance.cli._common import (
    check_output_files,
    one_line_errors,
    out,
    safe,
    safe_text,
    write_output_file,
)
from clearance.runs import SCHEMA_ID

__all__ = ["STARTER_TEAM", "register"]

STARTER_TEAM = (
    f"# yaml-language-server: $schema={SCHEMA_ID}\n"
    + """\
# A starter team for Clearance (every key: docs/team-file.md in Clearance). Run it:
#   clearance run team.yaml                    # the embedded model (make install puts it in)
#   clearance run team.yaml --model fake:try   # a deterministic fake model: no model needed
#   clearance run team.yaml --model openai:gpt-4o-mini   # or any OpenAI-compatible server
# then look at what each agent saw:  clearance inspect RUN_ID   and   clearance verify RUN_ID
#
# Every agent sees nothing by default: a task's prompt holds its own text, its agent's
# instructions and the results of the tasks it depends on (depends_on), nothing else.

name: starter                 # the team's name, shown by clearance runs
goal: >-                      # what the coordinator's final answer (the synthesis) answers
  A short, accurate note on what SQLite is good at and when not to use it.
model: llama-cpp:smollm2      # the default model of every agent ("provider:name")
max_concurrency: 2            # tasks running at once; a task starts when its dependencies end

agents:
  - name: researcher
    role: Finds facts.        # shown to the coordinator when it plans (run_team)
    instructions: You list facts, one per line, each one sentence. No opinions.
    limits:
      max_output_tokens: 300  # most tokens one answer may hold
      timeout_s: 120          # deadline of one model call, retries included, in seconds
  - name: writer
    instructions: You write short, plain paragraphs from the facts you are given.
    limits: {max_output_tokens: 300}
    # model: openai:gpt-4o-mini   # an agent may use its own model
    # sampling: {temperature: 0.2}

coordinator:                  # writes the final answer from every result
  name: editor
  instructions: You write the final answer in four sentences or fewer.
  limits: {max_output_tokens: 200}

tasks:
  - id: facts
    title: Collect facts
    description: List five facts about SQLite's strengths and limits.
    assignee: researcher
  - id: draft
    title: Draft the note
    description: Write one paragraph on when to use SQLite, and one on when not to.
    assignee: writer
    depends_on: [facts]       # sees the result of facts, and nothing else
  # A structured hand-off: the answer must be JSON matching the schema (one repair attempt).
  # - id: verdict
  #   title: Verdict
  #   description: Rate SQLite for a small web app from 0 to 10.
  #   assignee: writer
  #   depends_on: [facts]
  #   output_schema:
  #     type: object
  #     required: [score, reason]
  #     properties:
  #       score: {type: integer, minimum: 0, maximum: 10}
  #       reason: {type: string, maxLength: 200}
"""
)
"""The starter team `clearance init` writes."""

_Path = Annotated[Path, typer.Argument(help="Where to write the team file.")]
_Force = Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")]


@one_line_errors
def init(path: _Path = Path("team.yaml"), force: _Force = False) -> None:
    """Write a commented starter team file (team.yaml) that runs as it is."""
    from clearance.runs import team_file_schema

    if path.name == SCHEMA_ID:  # the schema, written next, would replace the team file
        raise ConfigError(
            f"{SCHEMA_ID} is the schema file init writes beside the team file; "
            "give the team file another name",
            field="path",
        )
    if safe(path) != str(path) or any(c in str(path) for c in "\n\t"):  # not shown as is
        raise ConfigError(
            f"the file name {str(path)!a} holds a control character (or a bidirectional "
            "override): give another name",
            field="path",
        )
    schema = path.parent / SCHEMA_ID
    keep = (schema.exists() or schema.is_symlink()) and not force
    if not keep:  # checked before the team file is written: both are written, or neither
        check_output_files({"path": schema})
    _write(path, STARTER_TEAM, force=force)
    out.print(safe_text(f"wrote {path}"), soft_wrap=True)
    if keep:
        out.print(safe_text(f"kept {schema} (--force replaces it)"), soft_wrap=True)
    else:
        _write(schema, json.dumps(team_file_schema(), indent=2) + "\n", force=force)
        out.print(safe_text(f"wrote {schema} (editors check the team file with it)"))
    shown = shlex.quote(str(path))  # a command to type back, spaces and quotes included
    out.print(safe_text(f"try it without a model:  clearance run {shown} --model fake:try"))
    out.print(safe_text(f"run it:                  clearance run {shown}"), soft_wrap=True)


def _write(path: Path, text: str, *, force: bool) -> None:
    """Write ``text`` to ``path``: a new file, or (``force``) over a file; never via a link.

    As every output file is written (`write_output_file`): whole or not at all, never into
    a FIFO (which would block) or a file with another hard link; without ``force`` nothing
    at the name is replaced, even a file that appears while it is written.

    Raises:
        ConfigError: ``path`` is a folder, exists (without ``force``), is a link, is not a
            regular file with one link (with ``force``), or cannot be written.
    """
    if os.path.isdir(path):  # False for a name the system refuses (too long...): said below
        raise ConfigError(f"{str(path)!r} is a folder; give a file name", field="path")
    taken = None if force else f"{path} exists: give another path, or --force to overwrite it"
    write_output_file(path, text, flag="path", exists=taken)


def register(app: typer.Typer) -> None:
    """Add ``init`` to the ``clearance`` command."""
    app.command()(init)
