"""Findings from ruff (a well-kept linter), run on one module's source.

Ruff runs as ``python -m ruff`` from the running interpreter's environment, in an empty
temporary folder, with ``--isolated`` (no configuration file of the reviewed folder is
read), ``--ignore-noqa`` (a ``# noqa`` or ``# ruff: noqa`` comment of the reviewed module
hides none of its findings: the code under review does not choose what its review sees)
and the source on stdin: nothing of the input folder but the given text reaches it.
Its output is read while it comes, at most `_MAX_OUTPUT_BYTES`, within `LINT_TIMEOUT_S`.
"""

from __future__ import annotations

import json
import os
import selectors
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "CONTEXT_RULES",
    "LINT_RULES",
    "LINT_TIMEOUT_S",
    "MAX_FINDINGS",
    "LintResult",
    "lint_source",
]

LINT_RULES = "F,E9,B,C901,S,PLR0911,PLR0912,PLR0915,PLW0120,PLW0603,PLW2901"
"""Ruff rules selected: pyflakes, syntax errors, bugbear, complexity, bandit (security),
too many returns / branches / statements, and a few pylint warnings."""
LINT_TIMEOUT_S = 60.0
"""Deadline of one ruff run, in seconds."""
MAX_FINDINGS = 25
"""Most findings kept per module: the most severe first (then in line order)."""
CONTEXT_RULES: Mapping[str, str] = {
    "S101": "asserts are how tests and internal invariants are written",
    "S110": "swallowing an exception is often the function's purpose",
    "S112": "skipping on an exception is often the loop's purpose",
    "S311": "random numbers are only a risk where they guard a secret",
}
"""Rules whose hits need context the analysis lacks: kept as facts, severity ``context``,
never ranked."""
SEVERITIES = ("high", "medium", "low", "context")
"""Severities, most severe first."""
_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
_SEVERITY = {"S": "high", "F": "medium", "E": "medium", "B": "medium", "PLW": "medium"}


def _severity(code: str) -> str:
    """``high``, ``medium``, ``low`` or ``context`` for a ruff rule code."""
    if code in CONTEXT_RULES:
        return "context"
    for prefix in ("PLW", "S", "F", "E", "B"):
        if code.startswith(prefix):
            return _SEVERITY[prefix]
    return "low"  # complexity and size (C901, PLR09xx)


@dataclass(frozen=True, kw_only=True, slots=True)
class LintResult:
    """Ruff's findings on one module.

    Attributes:
        findings: At most `MAX_FINDINGS`, the most severe first, then in line order; each
            ``{"code", "message", "line", "severity"}``.
        total: How many findings ruff reported in all.
        counts: Findings per rule code, over all of them (not only those kept).
        problem: ``None``, or one line saying why there are no findings to trust (ruff
            missing, timed out or failed).
    """

    findings: list[dict[str, Any]] = field(default_factory=list)
    total: int = 0
    counts: dict[str, int] = field(default_factory=dict)
    problem: str | None = None


def lint_source(path: str, source: str, *, target_version: str | None = None) -> LintResult:
    """Run ruff on ``source`` and return its findings.

    Args:
        path: The module's path, shown to ruff as the file name (``--stdin-filename``).
        source: The module's text.
        target_version: The oldest Python the package supports, as ruff names it
            (``"py38"``): rules that only hold on newer versions stay quiet. ``None``:
            ruff's default.

    Returns:
        The findings (see `LintResult`): ``severity`` is ``high`` (security), ``medium``
        (likely bugs), ``low`` (complexity, size) or ``context`` (`CONTEXT_RULES`).
    """
    name = path.rsplit("/", 1)[-1] or "module.py"
    command = [
        sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache", "--ignore-noqa",
        "--output-format", "json", "--select", LINT_RULES,
        "--config", "lint.mccabe.max-complexity = 10",
        f"--stdin-filename={name}", "-",  # one token: a name like "--help.py" is no option
    ]  # fmt: skip
    if target_version is not None:
        command[-2:-2] = [f"--target-version={target_version}"]
    with tempfile.TemporaryDirectory(prefix="clearance-lint-") as cwd:
        try:
            done = _run_capped(command, source.encode("utf-8"), cwd)
        except OSError as exc:
            return LintResult(problem=f"ruff could not run: {exc.strerror or exc}")
    if isinstance(done, str):
        return LintResult(problem=done)
    returncode, stdout, stderr = done
    if returncode not in (0, 1) or not stdout.strip():
        first = stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        why = first[0][:200] if first else f"exit {returncode}"
        return LintResult(problem=f"ruff failed: {why}")
    try:
        raw = json.loads(stdout)
    except ValueError:
        return LintResult(problem="ruff's output is not JSON")
    findings: list[dict[str, Any]] = []
    for entry in raw if isinstance(raw, list) else []:
        if not isinstance(entry, dict):
            continue
        code = str(entry.get("code") or "")
        line = (entry.get("location") or {}).get("row")
        if not code or not isinstance(line, int):
            continue
        findings.append(
            {
                "code": code,
                "message": str(entry.get("message") or "")[:200],
                "line": line,
                "severity": _severity(code),
            }
        )
    findings.sort(key=lambda f: (SEVERITIES.index(f["severity"]), f["line"], f["code"]))
    counts = Counter(f["code"] for f in findings)
    return LintResult(
        findings=findings[:MAX_FINDINGS],
        total=len(findings),
        counts=dict(sorted(counts.items())),
    )


def _run_capped(command: list[str], source: bytes, cwd: str) -> tuple[int, bytes, bytes] | str:
    """Run ``command`` on ``source`` (its stdin); its output read while it comes, capped.

    Ruff writes a few hundred bytes of JSON per finding, so a hostile module (a 4 MiB file of
    ``import os`` lines) makes it write hundreds of megabytes. Its stdout is read at most
    `_MAX_OUTPUT_BYTES` plus one chunk, within `LINT_TIMEOUT_S`; past either it is killed.
    Stdin and stderr are files, so neither can block it.

    Returns:
        ``(returncode, stdout, the start of stderr)``, or one line saying why there is none.

    Raises:
        OSError: The command cannot be started.
    """
    with tempfile.TemporaryFile() as stdin, tempfile.TemporaryFile() as stderr:
        stdin.write(source)
        stdin.seek(0)
        process = subprocess.Popen(
            command, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, cwd=cwd
        )
        assert process.stdout is not None
        deadline = time.monotonic() + LINT_TIMEOUT_S
        chunks: list[bytes] = []
        size = 0
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(process.stdout, selectors.EVENT_READ)
                while True:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return f"ruff took more than {LINT_TIMEOUT_S:.0f} s"
                    if not selector.select(left):
                        continue
                    chunk = os.read(process.stdout.fileno(), 1 << 16)
                    if not chunk:
                        break
                    size += len(chunk)
                    if size > _MAX_OUTPUT_BYTES:
                        return f"ruff's output is over {_MAX_OUTPUT_BYTES:,} bytes: not read"
                    chunks.append(chunk)
            try:
                returncode = process.wait(timeout=max(deadline - time.monotonic(), 0.1))
            except subprocess.TimeoutExpired:
                return f"ruff took more than {LINT_TIMEOUT_S:.0f} s"
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            process.stdout.close()
        stderr.seek(0)
        return returncode, b"".join(chunks), stderr.read(4096)
