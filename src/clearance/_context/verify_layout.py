"""Verifying a recorded prompt's text against the layout table of its kind (`layout`).

The user message must parse back into exactly the manifest's items, in order, re-render
byte for byte, and follow one of the layouts of its kind (the current one, or an earlier
one for runs recorded before a layout change): its sections in the layout's order, each
holding only the kinds of item its row allows, each block carrying the item's title where
the row says (a heading line, the opening fence line, or none for a bare block), and the
layout's closing instruction (for the planning prompt, with the example plan its roster
gives). Whether each title is the one the recorded graph gives is
checked with the items (`verify_items`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from clearance._context.layout import LAYOUTS, Layout, layout_kind, plan_example
from clearance._context.render import (
    PromptParseError,
    Section,
    parse_user_message,
    render_user_message,
)
from clearance._context.verify_facts import Problem
from clearance._core.origins import Origin, Subject
from clearance._core.prompt import sha256_text
from clearance._core.vocabulary import OriginKind
from clearance._state.ledger import CallRecord

__all__ = ["attach_contents", "check_layout"]


def attach_contents(user: str, items: list[dict[str, Any]]) -> None:
    """Give each item after the instructions its block's text (``"_content"``), if parsable."""
    try:
        sections, _ = parse_user_message(user)
    except PromptParseError:
        return
    blocks = [b for s in sections for b in s.blocks]
    if len(blocks) == len(items) - 1:
        for block, item in zip(blocks, items[1:], strict=True):
            item["_content"] = block.content


def check_layout(call: CallRecord, user: str, items: list[dict[str, Any]]) -> Iterator[Problem]:
    """The user message is exactly the rendering of the manifest's items, in its layout."""
    try:
        sections, trailer = parse_user_message(user)
    except PromptParseError as exc:
        yield None, f"the prompt does not have the rendered layout: {exc}"
        return
    count = sum(len(s.blocks) for s in sections)
    if count != len(items) - 1:
        yield None, f"the prompt holds {count} blocks, the manifest lists {len(items) - 1}"
    blocks = [b for s in sections for b in s.blocks]
    for block, item in zip(blocks, items[1:], strict=False):
        if sha256_text(block.content) != item.get("sha256"):
            yield str(item.get("origin")), "the block's content does not match the manifest's hash"
    if render_user_message(sections, trailer) != user:
        yield None, "the prompt holds text outside the manifest's items"
    summaries = any(Origin.parse(str(i.get("origin"))).kind == OriginKind.SUMMARY_OF for i in items)
    kind = layout_kind(Subject.parse(call.subject), summaries=summaries)
    if kind is None:
        return  # an unknown subject: the admission check reports it
    tools = bool((call.manifest.get("clearance") or {}).get("tools"))
    first: list[Problem] | None = None
    for shape in LAYOUTS[kind]:
        problems = list(_against(shape, sections, trailer, items, tools=tools))
        if not problems:
            return
        first = problems if first is None else first
    yield from first or ()


def _against(
    shape: Layout,
    sections: Sequence[Section],
    trailer: str,
    items: list[dict[str, Any]],
    *,
    tools: bool,
) -> Iterator[Problem]:
    """What in the prompt does not follow ``shape``."""
    headings = [row.heading for row in shape.rows]
    position = -1
    index = 1
    for section in sections:
        if section.heading not in headings:
            yield None, f"a {shape.kind} prompt has no section {section.heading!r}"
            index += len(section.blocks)
            continue
        if headings.index(section.heading) <= position:
            yield None, f"the section {section.heading!r} is out of place"
        position = headings.index(section.heading)
        row = shape.row(section.heading)
        for block in section.blocks:
            item = items[index] if index < len(items) else {}
            index += 1
            origin = str(item.get("origin"))
            if Origin.parse(origin).kind not in row.kinds:
                yield (
                    origin,
                    f"a {Origin.parse(origin).kind!r} item under the section {section.heading!r}",
                )
            expected = None if row.bare else item.get("title")
            if block.heading != expected:
                yield (
                    origin,
                    f"the block is headed {block.heading!r}, the layout says {expected!r}",
                )
            elif block.on_fence != (row.on_fence and not row.bare):
                where = "on its fence line" if row.on_fence else "on a heading line"
                yield origin, f"the layout puts the block's title {where}"
    suffix = plan_example(_first_agent(items)) if shape.trailer_is_prefix else ""
    if not shape.accepts_trailer(trailer, suffix=suffix) or (
        trailer == shape.trailers.get("tools") and not tools
    ):
        yield None, "the closing instruction is not the builder's"


def _first_agent(items: list[dict[str, Any]]) -> str | None:
    """The first roster agent (``agent:<name>``) of a planning prompt, the example's assignee."""
    for item in items:
        origin = Origin.parse(str(item.get("origin")))
        if origin.kind == OriginKind.AGENT:
            return origin.id
    return None
