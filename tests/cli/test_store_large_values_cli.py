"""``clearance store get|query --json`` of a huge value full of control characters.

A store value may be large (up to `MAX_VALUE_BYTES`), and a store file edited by hand may
hold anything. Every control character is printed escaped (`safe`), which made one Python
call and one small string per character, then the whole escaped value went to rich as one
`Text`: 50 MB of ``ESC`` took over a minute and close to 4 GB. `safe` is now one
``str.translate``, and the value is written in pieces, so memory is a small multiple of the
value.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from typer.testing import CliRunner

from clearance import ContextStore
from clearance.cli import app
from clearance.cli._common import safe

T = TypeVar("T")

N = 2_000_000
"""Characters of the value: 8 MB once escaped."""


def peak_mb(action: Callable[[], T]) -> tuple[T, float]:
    """``action()``'s result and the most memory Python allocated meanwhile, in MB."""
    tracemalloc.start()
    try:
        result = action()
        return result, tracemalloc.get_traced_memory()[1] / 1e6
    finally:
        tracemalloc.stop()


def test_safe_escapes_exactly_the_unsafe_characters() -> None:
    unsafe = {*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0)}
    unsafe |= {*range(0x202A, 0x202F), *range(0x2066, 0x206A)}
    for code in range(0x2100):
        char = chr(code)
        expected = char.encode("unicode_escape").decode("ascii") if code in unsafe else char
        assert safe(f"a{char}b") == f"a{expected}b", hex(code)
    assert safe("\u202e\u2069") == "\\u202e\\u2069"
    assert safe("tab\tline\n") == "tab\tline\n"
    assert safe(b"\x1b") == "b'\\x1b'"  # not text: its str(), as before


def test_safe_of_megabytes_of_escapes_takes_memory_linear_in_its_result() -> None:
    text, peak = peak_mb(lambda: safe("\x1b" * N))
    assert text == "\\x1b" * N
    # The result is 8 MB; a substitution per character made 150 MB of small strings.
    assert peak < 64, f"{peak:.0f} MB"


@pytest.fixture
def db(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with ContextStore(url) as store:
        store.set("ns", "k", "\x1b" * N, "writer")
    return url


def test_store_get_prints_a_huge_value_whole_and_escaped_in_bounded_memory(db: str) -> None:
    runner = CliRunner()
    result, peak = peak_mb(lambda: runner.invoke(app, ["store", "get", "ns", "k", "--db", db]))
    assert result.exit_code == 0, result.output
    assert result.stdout == "\\x1b" * N + "\n"
    assert peak < 45, f"{peak:.0f} MB"  # the captured output alone is 8 MB


def test_store_query_json_prints_a_huge_value_whole_in_bounded_memory(db: str) -> None:
    runner = CliRunner()
    args = ["store", "query", "ns", "--json", "--db", db]
    result, peak = peak_mb(lambda: runner.invoke(app, args))
    assert result.exit_code == 0, result.output
    [line] = result.stdout.splitlines()
    assert '"value": "' + "\\u001b" * N + '"' in line
    assert peak < 65, f"{peak:.0f} MB"  # the captured output alone is 12 MB
