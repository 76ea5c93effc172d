"""A throwaway PostgreSQL server for the memory tests (see INFRA.md), one per session.

Skipped cleanly when PostgreSQL is not installed and cannot be installed (not root).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

PG_VERSION = "15"


def _pg_bin() -> Path | None:
    candidates = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return candidates[-1].parent if candidates else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=120)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    pytest.importorskip("psycopg")
    bindir = _pg_bin()
    if bindir is None and os.geteuid() == 0 and shutil.which("apt-get"):
        subprocess.run(
            ["apt-get", "install", "-y", "-q", f"postgresql-{PG_VERSION}"],
            capture_output=True,
            timeout=600,
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
        )
        bindir = _pg_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql)")
    as_pg: tuple[str, ...] = ("runuser", "-u", "postgres", "--") if os.geteuid() == 0 else ()
    tmp = Path(tempfile.mkdtemp(prefix="clearance-pg-"))
    data = tmp / "pg"
    data.mkdir()
    if os.geteuid() == 0:
        shutil.chown(tmp, "postgres", "postgres")
        shutil.chown(data, "postgres", "postgres")
    data.chmod(0o700)
    port = _free_port()
    try:
        _run(
            *as_pg,
            str(bindir / "initdb"),
            "-D",
            str(data),
            "-U",
            "postgres",
            "-A",
            "trust",
            "-E",
            "UTF8",
            "--locale=C.UTF-8",
        )
        _run(
            *as_pg,
            str(bindir / "pg_ctl"),
            "-D",
            str(data),
            "-l",
            str(data / "server.log"),
            "-w",
            "-t",
            "60",
            "-o",
            f"-p {port} -k {data} -c listen_addresses=127.0.0.1",
            "start",
        )
        try:
            _run(
                *as_pg,
                str(bindir / "psql"),
                "-h",
                str(data),
                "-p",
                str(port),
                "-U",
                "postgres",
                "-c",
                "CREATE DATABASE clearance_test",
            )
            yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/clearance_test"
        finally:
            _run(*as_pg, str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "stop")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
