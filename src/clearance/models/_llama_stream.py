"""Streaming the embedded model's text as it is generated.

llama-cpp-python reports token usage only for a completion made in one piece, so the embedded
provider generates in one piece (its answer and usage exactly as without streaming) and
watches generation through a stopping criterion, which sees the tokens generated so far:
each new piece of their text is handed to the request's sink. Text that may be the start of
a stop string (split across tokens) is held back until it is known not to be one, so no part
of a stop string the answer drops is streamed. When generation ends, whatever of the final
text was not yet streamed follows, so the pieces add up to the answer.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import Callable, Sequence
from typing import Any

from clearance.models._base import TextSink

__all__ = ["TokenTextStream", "threadsafe_sink"]


def threadsafe_sink(sink: TextSink) -> TextSink:
    """``sink``, callable from a worker thread: each piece is delivered on the running loop."""
    loop = asyncio.get_running_loop()

    def deliver(piece: str) -> None:
        loop.call_soon_threadsafe(sink, piece)

    return deliver


class TokenTextStream:
    """Turns the growing list of generated token ids into pieces of text for a sink.

    Args:
        detokenize: ``llm.detokenize`` (token ids, ``prev_tokens=``) to bytes.
        prompt: The prompt's token ids (generated ids follow them).
        sink: Receives each new piece of text (called on the generating thread).
        stop: The request's stop strings (generation ends before any of them).
    """

    def __init__(
        self,
        detokenize: Callable[..., bytes],
        prompt: Sequence[int],
        sink: TextSink,
        *,
        stop: Sequence[str] = (),
    ) -> None:
        self._detokenize = detokenize
        self._prompt = list(prompt)
        self._sink = sink
        self._stop = tuple(s for s in stop if s)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bytes = 0
        self._text = ""
        self._sent: list[str] = []

    def criterion(self, ids: Any, _logits: Any) -> bool:
        """A llama.cpp stopping criterion that never stops: it streams the new text."""
        generated = [int(t) for t in ids[len(self._prompt) :]]
        data = self._detokenize(generated, prev_tokens=self._prompt)
        if len(data) > self._bytes:
            self._text += self._decoder.decode(data[self._bytes :])
            self._bytes = len(data)
            sent = sum(map(len, self._sent))
            self._send(self._text[sent : self._safe_end(sent)])
        return False

    def _safe_end(self, sent: int) -> int:
        """How much of the text can be streamed: not a tail that may start a stop string.

        Never past a stop string's start (none starts in the ``sent`` characters already
        streamed).
        """
        text = self._text
        found = [i for i in (text.find(s, sent) for s in self._stop) if i >= 0]
        if found:
            return min(found)
        longest = max(map(len, self._stop), default=1)
        for start in range(max(sent, len(text) - longest + 1), len(text)):
            if any(s.startswith(text[start:]) for s in self._stop):
                return start
        return len(text)

    def finish(self, final: str) -> None:
        """Send what of ``final`` (the answer) has not been streamed yet."""
        sent = "".join(self._sent)
        if final.startswith(sent):
            self._send(final[len(sent) :])

    def _send(self, piece: str) -> None:
        if piece:
            self._sent.append(piece)
            self._sink(piece)
