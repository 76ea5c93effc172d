"""Rendering untrusted text into fenced prompt blocks, and parsing it back.

A user message is a sequence of parts joined by blank lines: section headings (``# ...`` or
``## ...``), blocks, and a closing instruction (the trailer). A block is an opening fence
line, the content, and a closing fence line, its heading in one of three forms:

- headed: a heading line ``### <heading>`` before the opening fence;
- labelled: the heading on the opening fence line, after a space (``~~~~ <heading>``, like
  a Markdown info string), so the label is part of its block's fence;
- bare: no heading (the fence only).

The fence is a run of tildes longer than any run of tildes in the content, so no line of the
content can close the block early, and text inside a block cannot pass for a heading, a
label or a section of the prompt. A heading is collapsed onto one line (`one_line`), so no
title can add a line either. `parse_user_message` follows the fences and recovers exactly the
sections and blocks that `render_user_message` rendered; ``clearance verify`` relies on that
round trip.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "Block",
    "PromptParseError",
    "Section",
    "fence_block",
    "fence_for",
    "one_line",
    "parse_user_message",
    "render_block",
    "render_parts",
    "render_user_message",
]

_TILDES = re.compile(r"~+")
_FENCE_LINE = re.compile(r"~{4,}")
_LABEL_LINE = re.compile(r"(~{4,}) (.*)")
MIN_FENCE = 4


class PromptParseError(ValueError):
    """A user message does not have the layout the builder renders."""


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced item: a one-line heading (``None`` for a bare block) and the content.

    ``on_fence`` says the heading is a label on the opening fence line rather than a
    ``### `` line before it.
    """

    heading: str | None
    content: str
    on_fence: bool = False


@dataclass(frozen=True, slots=True)
class Section:
    """A section heading (``# Task``, ``## Context from prerequisite tasks``...) and its blocks."""

    heading: str
    blocks: tuple[Block, ...]


def fence_for(content: str) -> str:
    """A tilde fence (at least 4) longer than the longest run of ``~`` in ``content``."""
    if "~" not in content:  # the common case: no regex scan needed
        return "~" * MIN_FENCE
    longest = max((len(m) for m in _TILDES.findall(content)), default=0)
    return "~" * max(MIN_FENCE, longest + 1)


def one_line(text: str) -> str:
    """Collapse whitespace (newlines included) so a heading stays on its line."""
    return " ".join(text.split())


def render_block(heading: str | None, content: str, *, on_fence: bool = False) -> str:
    """Render ``content`` fenced under a ``### heading`` line (or labelled on its fence).

    Args:
        heading: Heading text, collapsed to one line; ``None`` for a bare block (the fence
            only).
        content: Untrusted text, rendered verbatim inside the fence.
        on_fence: Put the heading on the opening fence line (``~~~~ heading``) instead.
    """
    line = None if heading is None else one_line(heading)
    return fence_block(line, content, on_fence=on_fence)


def fence_block(heading_line: str | None, content: str, *, on_fence: bool = False) -> str:
    """`render_block` for a heading already collapsed with `one_line`.

    Args:
        heading_line: Heading text on one line (``one_line(heading) == heading``), or
            ``None`` for a bare block.
        content: Untrusted text, rendered verbatim inside the fence.
        on_fence: Put the heading on the opening fence line, after a space.
    """
    fence = fence_for(content)
    if heading_line is None:
        return f"{fence}\n{content}\n{fence}"
    if on_fence:
        return f"{fence} {heading_line}\n{content}\n{fence}"
    return f"### {heading_line}\n{fence}\n{content}\n{fence}"


def render_user_message(sections: Sequence[Section], trailer: str) -> str:
    """Render sections (empty ones are left out) and the trailer, joined by blank lines."""
    return render_parts(
        (
            (s.heading, [render_block(b.heading, b.content, on_fence=b.on_fence) for b in s.blocks])
            for s in sections
        ),
        trailer,
    )


def render_parts(sections: Iterable[tuple[str, Sequence[str]]], trailer: str) -> str:
    """`render_user_message` for blocks already rendered with `render_block`.

    Args:
        sections: ``(section heading, rendered blocks)`` pairs; empty ones are left out.
        trailer: The closing instruction.
    """
    parts: list[str] = []
    for heading, blocks in sections:
        if not blocks:
            continue
        parts.append(heading)
        parts.extend(blocks)
    parts.append(trailer)
    return "\n\n".join(parts)


def parse_user_message(text: str) -> tuple[tuple[Section, ...], str]:
    """Recover the sections, blocks and trailer of a rendered user message.

    Returns:
        ``(sections, trailer)``. ``render_user_message(*parse_user_message(t)) == t`` for
        every message the builder renders.

    Raises:
        PromptParseError: The text does not follow the rendered layout (for example a block
            whose fence never closes, or a block outside any section).
    """
    lines = text.split("\n")
    sections: list[Section] = []
    heading: str | None = None
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        bare = _FENCE_LINE.fullmatch(line) is not None
        label = None if bare else _LABEL_LINE.fullmatch(line)
        if bare or label is not None or line.startswith("### "):
            if heading is None:
                raise PromptParseError(f"line {i + 1}: a block outside any section")
            at = i if bare or label is not None else i + 1  # the opening fence
            if label is not None:
                fence, title = label.group(1), label.group(2)
            elif at >= len(lines) or not _FENCE_LINE.fullmatch(lines[at]):
                raise PromptParseError(f"line {at + 1}: expected an opening fence")
            else:
                fence, title = lines[at], None if bare else line[4:]
            try:
                end = lines.index(fence, at + 1)
            except ValueError:
                raise PromptParseError(f"line {at + 1}: the fence never closes") from None
            content = "\n".join(lines[at + 1 : end])
            blocks.append(Block(heading=title, content=content, on_fence=label is not None))
            i = end + 1
        elif line.startswith(("# ", "## ")):
            if heading is not None:
                sections.append(Section(heading=heading, blocks=tuple(blocks)))
            heading, blocks = line, []
            i += 1
        else:
            # The trailer: everything that is left.
            if heading is not None:
                sections.append(Section(heading=heading, blocks=tuple(blocks)))
            return tuple(sections), "\n".join(lines[i:])
        # Parts are separated by exactly one blank line.
        if i < len(lines):
            if lines[i] != "":
                raise PromptParseError(f"line {i + 1}: expected a blank line between parts")
            i += 1
    raise PromptParseError("the message has no closing instruction")
