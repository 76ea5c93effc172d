"""The embedded model's chat template, applied so that no message content is ever markup.

llama.cpp's chat handler tokenizes the rendered prompt with special tokens enabled:
``<|im_start|>system`` in an upstream result, a file or a tool's answer would become a real
turn marker, and the model would read it as an instruction from the system. Here the template
is rendered with a placeholder for each message's content; the template's own text (between
the placeholders) is tokenized with special tokens, and each content with ``special=False``,
so text from anywhere else is only ever text. Content is inserted verbatim where the template
puts it (a template that transforms content, with ``trim`` for example, sees the placeholder
instead).
"""

from __future__ import annotations

import re
import secrets
from typing import Any

__all__ = ["ChatTemplate"]

_PROBE = ({"role": "system", "content": "."}, {"role": "user", "content": "."})
"""A prompt's two messages (as `Prompt.to_dicts` gives them) for `ChatTemplate.framing`."""


class ChatTemplate:
    """A loaded model's chat template (ChatML when its file has none), as llama.cpp renders it.

    The formatter is made once per loaded model; `framing` is counted once too.
    """

    def __init__(self) -> None:
        self._formatter: Any = None
        self._formatter_for: Any = None
        self._framing: int | None = None

    def tokens(
        self, llm: Any, messages: list[dict[str, str]]
    ) -> tuple[list[int], list[str], list[Any]]:
        """The token ids fed to ``llm`` for ``messages``, through its chat template.

        The template's own text is tokenized with special tokens (its turn markers are real);
        every message's content with ``special=False``, so a ``<|im_start|>`` inside content
        is plain text.

        Args:
            llm: The loaded ``llama_cpp.Llama``.
            messages: ``{"role", "content"}`` dicts, as `Prompt.to_dicts` gives them.

        Returns:
            ``(token_ids, stop_strings, stopping_criteria)`` for ``create_completion``.

        Raises:
            ValueError: The chat template refused the messages.
        """
        tokens, _, stop, stopping = self._render(llm, messages)
        return tokens, stop, stopping

    def framing(self, llm: Any) -> int:
        """Tokens of the template's own text around a system and a user message.

        That is its turn markers and the opening of the answer: what a prompt costs beyond
        the tokens of its messages' text (``count_tokens``), the same for every prompt the
        builder makes (one system and one user message).

        Raises:
            ValueError: The chat template refused the messages.
        """
        if self._framing is None or self._formatter_for is not llm:
            self._framing = self._render(llm, list(_PROBE))[1]
        return self._framing

    def _render(
        self, llm: Any, messages: list[dict[str, str]]
    ) -> tuple[list[int], int, list[str], list[Any]]:
        """``(token ids, of which the template's own, stop strings, stopping criteria)``."""
        formatter = self._formatter_of(llm)
        marker = f"\ue000{secrets.token_hex(8)}:"
        while any(marker in m["content"] for m in messages):  # pragma: no cover - 2**-64
            marker = f"\ue000{secrets.token_hex(8)}:"
        pattern = re.compile(re.escape(marker) + r"(\d+)\ue001")
        shown = [
            {"role": m["role"], "content": f"{marker}{i}\ue001"} for i, m in enumerate(messages)
        ]
        formatted = formatter(messages=shown)
        tokens: list[int] = []
        own = 0
        for k, piece in enumerate(pattern.split(formatted.prompt)):
            if k % 2:  # a placeholder's message number
                text, special = messages[int(piece)]["content"], False
            else:  # the template's own text
                text, special = piece, True
            if text:
                ids = llm.tokenize(text.encode("utf-8"), add_bos=False, special=special)
                tokens += ids
                own += len(ids) if special else 0
        stop = formatted.stop if isinstance(formatted.stop, list) else [formatted.stop or ""]
        stopping = list(formatted.stopping_criteria or ())
        return tokens, own, [s for s in stop if s], stopping

    def _formatter_of(self, llm: Any) -> Any:
        """The template's formatter for ``llm``, made once per loaded model."""
        formatter = self._formatter
        if formatter is None or self._formatter_for is not llm:
            from llama_cpp import llama_chat_format

            template = llm.metadata.get("tokenizer.chat_template") or (
                llama_chat_format.CHATML_CHAT_TEMPLATE
            )
            eos, bos = llm.token_eos(), llm.token_bos()
            formatter = llama_chat_format.Jinja2ChatFormatter(
                template=template,
                eos_token=llm._model.token_get_text(eos) if eos != -1 else "",
                bos_token=llm._model.token_get_text(bos) if bos != -1 else "",
                stop_token_ids=[eos] if eos != -1 else None,
            )
            self._formatter, self._formatter_for = formatter, llm
            self._framing = None
        return formatter
