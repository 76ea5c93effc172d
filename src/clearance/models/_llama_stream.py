"""Streaming the embedded model's text as it is generated.

llama-cpp-python reports token usage only for a completion made in one piece, so the embedded
provider generates in one piece (its answer and usage exactly as without streaming) and
watches generation through a stopping criterion, which sees the tokens generated so far:
each new piece of their text is handed to the request's sink. When generation ends, whatever
of the final text was not yet streamed follows, so the pieces add up to the answer (a stop
string the final answer drops may have been streamed before it was recognized).
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
    """

    def __init__(
        self,
        detokenize: Callable[..., bytes],
        prompt: Sequence[int],
        sink: TextSink,
    ) -> None:
        self._detokenize = detokenize
        self._prompt = list(prompt)
        self._sink = sink
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._bytes = 0
        self._sent: list[str] = []

    def criterion(self, ids: Any, _logits: Any) -> bool:
        """A llama.cpp stopping criterion that never stops: it streams the new text."""
        generated = [int(t) for t in ids[len(self._prompt) :]]
        data = self._detokenize(generated, prev_tokens=self._prompt)
        if len(data) > self._bytes:
            self._send(self._decoder.decode(data[self._bytes :]))
            self._bytes = len(data)
        return False

    def finish(self, final: str) -> None:
        """Send what of ``final`` (the answer) has not been streamed yet."""
        sent = "".join(self._sent)
        if final.startswith(sent):
            self._send(final[len(sent) :])

    def _send(self, piece: str) -> None:
        if piece:
            self._sent.append(piece)
            self._sink(piece)
