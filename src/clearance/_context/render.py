"""Rendering of untrusted text into fenced prompt blocks.

Every block is a heading line, an opening fence line, the content, and a closing fence
line. The fence is a run of tildes longer than any run of tildes in the content, so no line
of the content can close the block early, and text inside a block cannot pass for a heading
or section of the prompt: a reader (or `parse_blocks`) that follows the fences recovers
exactly the items that were rendered.
"""

from __future__ import annotations

import re

__all__ = ["fence_for", "one_line", "render_block"]

_TILDES = re.compile(r"~+")
MIN_FENCE = 4


def fence_for(content: str) -> str:
    """A tilde fence (at least 4) longer than the longest run of ``~`` in ``content``."""
    longest = max((len(m) for m in _TILDES.findall(content)), default=0)
    return "~" * max(MIN_FENCE, longest + 1)


def one_line(text: str) -> str:
    """Collapse whitespace (newlines included) so a title stays on its heading line."""
    return " ".join(text.split())


def render_block(heading: str, content: str) -> str:
    """Render ``content`` fenced under a ``### heading`` line.

    Args:
        heading: Trusted heading text; collapsed to one line.
        content: Untrusted text, rendered verbatim inside the fence.
    """
    fence = fence_for(content)
    return f"### {one_line(heading)}\n{fence}\n{content}\n{fence}"
