"""Assembling a prompt from admitted parts, in the layout of its kind (`layout`).

The prompt builders admit parts (an origin, a title and the content) and hand them over by
section heading; `PromptAssembler` renders each part as a fenced block, orders the sections
as the kind's current `Layout` says, appends the trailer, counts tokens, enforces the
prompt's budget and writes the manifest. It never admits anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from clearance._context import layout
from clearance._context.clearance import Clearance
from clearance._context.render import fence_block, one_line, render_parts
from clearance._core.errors import LimitExceeded
from clearance._core.prompt import (
    ChatMessage,
    ContextItem,
    ContextManifest,
    Prompt,
    messages_sha256,
)
from clearance._core.spec import Agent

__all__ = ["Part", "PromptAssembler", "TokenCounter"]

TokenCounter = Callable[[str], int]
"""A function returning how many tokens a text takes for the target model."""

Block = tuple[ContextItem, str]
"""An admitted item and its rendered block."""


class Part(NamedTuple):
    """One admitted item before rendering: its origin, title and text."""

    origin: str
    title: str
    content: str


class PromptAssembler:
    """Renders admitted parts into a `Prompt` with its manifest, in its kind's layout.

    A task's result usually enters several prompts (each dependent's, then the synthesis).
    The assembler renders it once per way of rendering (labelled on its fence, headed or
    bare): it keeps the block
    of each result it rendered and renders it again only if its text or title changed.

    Args:
        count_tokens: Token counter of the target model; manifests and budgets use it.
        memory_groups: ``{group name: members}`` declared in the team file; ``None`` for none.
    """

    def __init__(
        self,
        *,
        count_tokens: TokenCounter,
        memory_groups: Mapping[str, Iterable[str]] | None = None,
    ):
        self._count = count_tokens
        self._memory_groups = {g: frozenset(m) for g, m in (memory_groups or {}).items()}
        # (``task_result:<id>``, bare, on_fence) -> (title, content, block): see `_render`.
        self._results: dict[tuple[str, bool, bool], tuple[str, str, Block]] = {}
        # (agent name, instructions as declared) -> the item and the system message opening
        # its prompts, made once (both are immutable).
        self._instructions: dict[tuple[str, str], tuple[ContextItem, ChatMessage]] = {}

    def _render(self, part: Part, row: layout.Row) -> Block:
        """The item and its rendered block in ``row``'s form; its tokens are the block's.

        A bare block has no heading line; its title is kept in the manifest. A result
        (``task_result:<id>``) is rendered once per form and reused while its title and
        content stay the same (compared by value).
        """
        key = (part.origin, row.bare, row.on_fence)
        cacheable = part.origin.startswith("task_result:")
        if cacheable:
            kept = self._results.get(key)
            if kept is not None and kept[0] == part.title and kept[1] == part.content:
                return kept[2]
        title = one_line(part.title)
        text = fence_block(None if row.bare else title, part.content, on_fence=row.on_fence)
        block = (
            ContextItem(
                origin=part.origin, title=title, content=part.content, tokens=self._count(text)
            ),
            text,
        )
        if cacheable:
            self._results[key] = (part.title, part.content, block)
        return block

    def _block_tokens(self, kind: str, heading: str, part: Part) -> int:
        """Tokens of ``part`` as a block of section ``heading`` of a ``kind`` prompt."""
        return self._render(part, layout.current(kind).row(heading))[0].tokens

    def _assemble(
        self,
        subject: str,
        agent: Agent,
        kind: str,
        sections: Mapping[str, Sequence[Part]],
        *,
        trailer: str = "default",
        trailer_suffix: str = "",
        max_prompt_tokens: int | None,
        clearance: Clearance | None = None,
        clearance_dict: dict[str, Any] | None = None,
        compression: Mapping[str, Any] | None = None,
    ) -> Prompt:
        """Render ``sections`` (parts by section heading) in the layout of ``kind``.

        Raises:
            ValueError: A section or item kind the layout does not have (a builder bug).
            LimitExceeded: The prompt exceeds ``max_prompt_tokens``.
        """
        shape = layout.current(kind)
        headings = _headings(shape)
        if not headings.issuperset(sections):
            unknown = sorted(set(sections) - headings)
            raise ValueError(f"the {kind} layout has no section {unknown}")
        # An agent's instructions open each of its prompts: one item (counted once) and one
        # system message each.
        opening = self._instructions.get((agent.name, agent.instructions))
        if opening is None:
            system = agent.instructions.strip()
            item = ContextItem(
                origin="instructions", title=agent.name, content=system, tokens=self._count(system)
            )
            opening = (item, ChatMessage(role="system", content=system))
            self._instructions[(agent.name, agent.instructions)] = opening
        instructions, system_message = opening
        system_tokens = instructions.tokens
        items = [instructions]
        rendered: list[tuple[str, list[str]]] = []
        for row in shape.rows:
            parts = sections.get(row.heading)
            if not parts:  # an empty section is not rendered (`render_parts`)
                continue
            texts = []
            for part in parts:
                if part.origin.partition(":")[0] not in row.kinds:
                    raise ValueError(f"a {part.origin!r} item under {row.heading!r}")
                item, text = self._render(part, row)
                items.append(item)
                texts.append(text)
            rendered.append((row.heading, texts))
        user = render_parts(rendered, shape.trailers[trailer] + trailer_suffix)
        messages = (system_message, ChatMessage(role="user", content=user))
        total = system_tokens + self._count(user)
        if max_prompt_tokens is not None and total > max_prompt_tokens:
            raise LimitExceeded(
                "max_prompt_tokens", value=total, maximum=max_prompt_tokens, subject=subject
            )
        if clearance is not None:
            clearance_dict = _clearance_dict(clearance)
        manifest = ContextManifest(
            subject=subject,
            agent=agent.name,
            items=tuple(items),
            total_tokens=total,
            prompt_sha256=messages_sha256(messages),
            clearance=clearance_dict,
            compression=dict(compression) if compression is not None else None,
        )
        return Prompt(messages=messages, manifest=manifest)


_HEADINGS: dict[tuple[str, int], frozenset[str]] = {}
"""The section headings of each layout, by kind and version (layouts are constants)."""


def _headings(shape: layout.Layout) -> frozenset[str]:
    """The section headings of ``shape``, computed once per layout."""
    key = (shape.kind, shape.version)
    found = _HEADINGS.get(key)
    if found is None:
        found = _HEADINGS[key] = frozenset(row.heading for row in shape.rows)
    return found


def _clearance_dict(clearance: Clearance) -> dict[str, Any]:
    if clearance.task_id.startswith(("conversation:", "summary:")):
        return {"agent": clearance.agent, "memory_scopes": sorted(clearance.memory_scopes)}
    return clearance.to_dict()
