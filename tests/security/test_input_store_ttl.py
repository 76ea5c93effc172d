"""Absurd TTLs (infinity, 1e20 seconds, NaN) are one-line errors, not overflow tracebacks."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearance import ConfigError
from clearance._state.store import MAX_TTL_S, ContextStore
from clearance.cli import app

runner = CliRunner()


@pytest.mark.parametrize("ttl", [math.inf, 1e20, math.nan, MAX_TTL_S * 2])
def test_the_store_refuses_an_absurd_ttl(tmp_path: Path, ttl: float) -> None:
    with ContextStore(f"sqlite:///{tmp_path / 's.db'}") as store:
        for write in (
            lambda: store.set("ns", "k", "v", "a", ttl),
            lambda: store.set_with_extension("ns", "k", "v", "a", ttl),
            lambda: store.touch("ns", "k", ttl),
        ):
            with pytest.raises(ConfigError, match="ttl_s: must be a positive number"):
                write()
        store.set("ns", "k", "v", "a", MAX_TTL_S)
        assert store.get("ns", "k") == "v"


@pytest.mark.parametrize("ttl", ["inf", "1e20"])
def test_store_set_on_the_command_line_gives_one_error_line(tmp_path: Path, ttl: str) -> None:
    db = f"sqlite:///{tmp_path / 's.db'}"
    result = runner.invoke(app, ["store", "set", "ns", "k", "v", "--ttl-s", ttl, "--db", db])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "ttl" in lines[0].lower(), result.output
