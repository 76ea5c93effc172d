"""Reading lines of stdin for the commands that talk with a person: chat, ``--interactive``.

One `StdinLines` per stdin (`stdin_lines`): a chat's messages, and in a run the answers to
approvals and to subagents' questions, come from the same reader, so a line read ahead for
one is never lost to another, and a question abandoned at its deadline leaves its read to
the next question.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import sys
import threading
from typing import TextIO

__all__ = ["MAX_LINE_BYTES", "LineTooLong", "StdinLines", "stdin_lines"]

MAX_LINE_BYTES = 32 * 1024 * 1024
"""Longest line of input read as a message, in bytes (line break included): 32 MiB, twice
the 40% of the largest ``--context-window`` at four bytes a token. A longer line is read to
its end and dropped, never held whole."""

_CHUNK_BYTES = 65536
"""Bytes read from stdin at a time."""


class LineTooLong(Exception):
    """A line of input over `MAX_LINE_BYTES` (or the reader's cap); it was read and dropped.

    Attributes:
        size: The line's size in bytes, line break included.
    """

    def __init__(self, size: int) -> None:
        super().__init__(f"the line is {size:,} bytes")
        self.size = size


class StdinLines:
    """The lines of stdin, as bytes, each read on a daemon thread of its own.

    Not `asyncio.to_thread`: a thread of the loop's executor blocked in a read is waited
    for when the loop closes and when the process exits, so Ctrl-C would end the session
    only once another line was typed. A daemon thread reading the file descriptor
    (``os.read``, holding no lock of ``sys.stdin``) is left behind instead. A stream
    without a file descriptor (a test's) is read through its ``buffer``.

    A line over ``max_bytes`` is read to its end (and dropped) in bounded memory, and
    `readline` raises `LineTooLong`; the next line is read as usual. Reading takes time
    linear in the input: each chunk is searched once for a line break.
    """

    def __init__(self, stream: TextIO, *, max_bytes: int = MAX_LINE_BYTES) -> None:
        self.stream = stream
        self._max_bytes = max_bytes
        self._pending = b""
        self._reading: asyncio.Future[bytes] | None = None  # a read under way
        try:
            self._fd: int | None = stream.fileno()
        except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
            self._fd = None

    async def readline(self) -> bytes:
        """The next line with its line break (``b""`` at end of input).

        A caller cancelled while waiting (at a deadline) loses nothing: the read goes on,
        and the next call gets its line.

        Raises:
            LineTooLong: The line was over the cap; it was read and dropped.
            OSError: Reading stdin failed.
        """
        loop = asyncio.get_running_loop()
        reading = self._reading
        if reading is None or reading.get_loop() is not loop:
            reading = self._reading = self._start_read(loop)
        try:
            line = await asyncio.shield(reading)
        except asyncio.CancelledError:
            raise  # the read goes on, for the next call
        except BaseException:
            self._reading = None
            raise
        self._reading = None
        return line

    def _start_read(self, loop: asyncio.AbstractEventLoop) -> asyncio.Future[bytes]:
        """Read the next line on a daemon thread; its outcome settles the returned future."""
        future: asyncio.Future[bytes] = loop.create_future()

        def deliver(line: bytes | None, error: BaseException | None) -> None:
            if future.done():
                return
            if error is not None:
                future.set_exception(error)
            else:
                future.set_result(line or b"")

        def read() -> None:
            try:
                line, error = self._read_line(), None
            except Exception as exc:  # delivered to the reader, raised there
                line, error = None, exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(deliver, line, error)

        threading.Thread(target=read, name="clearance-stdin", daemon=True).start()
        return future

    def _read_line(self) -> bytes:
        if self._fd is None:
            return self._read_stream_line()
        parts: list[bytes] = []
        size = 0
        chunk, self._pending = self._pending, b""
        while True:
            cut = chunk.find(b"\n")
            if cut >= 0:
                chunk, self._pending = chunk[: cut + 1], chunk[cut + 1 :]
            size += len(chunk)
            if size <= self._max_bytes:
                parts.append(chunk)
            else:
                parts.clear()  # over the cap: the rest of the line is read and dropped
            if cut >= 0:
                break
            chunk = os.read(self._fd, _CHUNK_BYTES)
            if not chunk:
                break
        if size > self._max_bytes:
            raise LineTooLong(size)
        return b"".join(parts)

    def _read_stream_line(self) -> bytes:
        """`_read_line` from a stream without a file descriptor."""
        buffer = getattr(self.stream, "buffer", None)

        def read(most: int) -> bytes:
            if buffer is not None:
                data: bytes = buffer.readline(most)
                return data
            return self.stream.readline(most).encode("utf-8", "surrogateescape")

        line = read(self._max_bytes + 1)
        if len(line) <= self._max_bytes:
            return line
        size = len(line)
        while not line.endswith(b"\n") and (line := read(_CHUNK_BYTES)):
            size += len(line)
        raise LineTooLong(size)


_SHARED: list[StdinLines] = []


def stdin_lines() -> StdinLines:
    """The reader of the current ``sys.stdin`` (made on first use; a new one when it changed)."""
    if not _SHARED or _SHARED[0].stream is not sys.stdin:
        _SHARED[:] = [StdinLines(sys.stdin)]
    return _SHARED[0]
