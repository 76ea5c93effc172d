"""``clearance chat``'s input: a line over the cap is refused in bounded memory and time."""

from __future__ import annotations

import io
import os
import threading
import time

import pytest

from clearance.cli._stdin import MAX_LINE_BYTES, LineTooLong
from clearance.cli._stdin import StdinLines as _StdinLines


class Pipe:
    """A stdin made of a pipe, written by a thread (as a shell pipeline would)."""

    def __init__(self, data: bytes) -> None:
        self.read_end, write_end = os.pipe()

        def write() -> None:
            with os.fdopen(write_end, "wb") as sink:
                sink.write(data)

        self.writer = threading.Thread(target=write, daemon=True)
        self.writer.start()

    def fileno(self) -> int:
        return self.read_end

    def close(self) -> None:
        self.writer.join(10)
        os.close(self.read_end)


async def read_all(lines: _StdinLines) -> list[bytes | int]:
    """Every line, or the size of each refused one, until end of input."""
    got: list[bytes | int] = []
    while True:
        try:
            line = await lines.readline()
        except LineTooLong as exc:
            got.append(exc.size)
            continue
        if not line:
            return got
        got.append(line)


async def test_a_line_over_the_cap_is_refused_and_the_next_line_is_read():
    pipe = Pipe(b"first\n" + b"x" * 300_000 + b"\nnext\nlast without a break")
    try:
        got = await read_all(_StdinLines(pipe, max_bytes=1000))  # type: ignore[arg-type]
    finally:
        pipe.close()
    assert got == [b"first\n", 300_001, b"next\n", b"last without a break"]


async def test_a_line_over_the_cap_from_a_stream_without_a_descriptor():
    stream = io.TextIOWrapper(io.BytesIO(b"ok\n" + b"y" * 5000 + b"\nafter\n"), encoding="utf-8")
    got = await read_all(_StdinLines(stream, max_bytes=1000))
    assert got == [b"ok\n", 5001, b"after\n"]


def test_the_cap_leaves_room_for_any_message_a_window_could_take():
    # The largest --context-window is 10,000,000 tokens, 40% of it a message: 4,000,000
    # tokens, 16 MB at four bytes a token.
    assert MAX_LINE_BYTES >= 16_000_000


@pytest.mark.parametrize("size", [40_000_000])
async def test_a_long_line_is_read_in_linear_time(size):
    # Each chunk was appended to the line so far and the whole line searched again for a
    # line break: a 60 MB line took 13 s, a 600 MB one twenty minutes.
    pipe = Pipe(b"z" * size + b"\n")
    try:
        started = time.monotonic()
        got = await read_all(_StdinLines(pipe))  # type: ignore[arg-type]
        elapsed = time.monotonic() - started
    finally:
        pipe.close()
    assert got == [size + 1]  # over the cap: refused, and not held
    assert elapsed < 10  # well under a second when linear


def test_chat_refuses_a_line_over_the_cap_in_one_line_and_goes_on(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    (tmp_path / "team.yaml").write_text(
        "agents:\n"
        "  - {name: carol, instructions: You are Carol., limits: {max_output_tokens: 32}}\n"
    )
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    stdin = b"hello\n" + b"w " * (MAX_LINE_BYTES // 2 + 10) + b"\nagain\n"
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "carol",
         "--model", "fake:x", "--db", f"sqlite:///{tmp_path / 'runs.db'}",
         "--context-window", "4000"],
        cwd=tmp_path, env=env, input=stdin, capture_output=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    assert len(result.stdout.decode().splitlines()) == 2  # both short messages answered
    refused = [line for line in result.stderr.decode().splitlines() if line.startswith("error: ")]
    assert refused == [
        f"error: the line is {MAX_LINE_BYTES + 21:,} bytes, over the {MAX_LINE_BYTES:,} a "
        "message may hold; the message was not sent"
    ]


@pytest.mark.network
def test_an_answer_is_printed_even_when_compressing_after_it_fails(tmp_path, openai_server):
    # The summary after an answer came back empty: the session ended (exit 1, as documented)
    # and the answer the model had just given, recorded in the ledger, was never shown.
    import subprocess
    import sys
    from pathlib import Path

    def reply(messages):
        if "Summarize the conversation above" in messages[-1]["content"]:
            return ""
        return "answer number " + str(len(messages[-1]["content"])) + " " + "lore " * 120

    server = openai_server(reply)
    (tmp_path / "team.yaml").write_text(
        "agents:\n"
        "  - {name: carol, instructions: You are Carol., limits: {max_output_tokens: 64}}\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=str(Path(__file__).parents[2] / "src"),
        OPENAI_BASE_URL=server,
        OPENAI_API_KEY="test",
    )
    stdin = "".join(f"message {i}\n" for i in range(12))  # the answers fill the window
    result = subprocess.run(
        [sys.executable, "-m", "clearance", "chat", "team.yaml", "--agent", "carol",
         "--model", "openai:scripted", "--strategy", "summarize", "--context-window", "700",
         "--db", f"sqlite:///{tmp_path / 'runs.db'}"],
        cwd=tmp_path, env=env, input=stdin, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "error: the model wrote an empty summary" in result.stderr
    answers = [body for body in server.bodies if "Summarize" not in json_text(body)]
    printed = result.stdout.splitlines()
    assert printed and all(line.startswith("answer number") for line in printed)
    assert len(printed) == len(answers)  # every answer given was shown, the last one too


def json_text(body) -> str:
    import json

    return json.dumps(body)
