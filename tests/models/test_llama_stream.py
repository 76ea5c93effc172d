"""`TokenTextStream`: the embedded model's streamed pieces add up to its answer."""

from __future__ import annotations

from clearance.models._llama_stream import TokenTextStream

PIECES = {1: b"The sky ", 2: b"is ST", 3: b"OP", 4: b" blue", 5: b"\xe6\x9d", 6: b"\xb1 ok"}
"""Token id -> bytes: a stop string and a 3-byte character each split across two tokens."""


def detokenize(ids: list[int], prev_tokens: list[int] | None = None) -> bytes:
    return b"".join(PIECES[i] for i in ids)


def streamed(generated: list[int], final: str, stop: tuple[str, ...]) -> list[str]:
    pieces: list[str] = []
    stream = TokenTextStream(detokenize, [0], pieces.append, stop=stop)
    for n in range(1, len(generated) + 1):
        assert stream.criterion([0, *generated[:n]], None) is False
    stream.finish(final)
    return pieces


def test_a_stop_string_split_across_tokens_is_not_streamed() -> None:
    # "ST" was streamed before "OP" completed the stop string: the pieces said "The sky is
    # ST" while the answer was "The sky is ".
    pieces = streamed([1, 2, 3, 4], "The sky is ", stop=("STOP",))
    assert "".join(pieces) == "The sky is "
    assert all("S" not in p for p in pieces)


def test_held_back_text_that_is_no_stop_string_follows() -> None:
    pieces = streamed([1, 2, 4], "The sky is ST blue", stop=("STOP",))
    assert "".join(pieces) == "The sky is ST blue"


def test_a_character_split_across_tokens_arrives_whole() -> None:
    pieces = streamed([5, 6], "\u6771 ok", stop=())
    assert "".join(pieces) == "\u6771 ok"
    assert "\ufffd" not in "".join(pieces)
