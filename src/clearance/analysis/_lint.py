"""Findings from ruff (a well-kept linter), run on one module's source.

Ruff runs as ``python -m ruff`` from the running interpreter's environment, in an empty
temporary folder, with ``--isolated`` (no configuration file of the reviewed folder is
read) and the source on stdin: nothing of the input folder but the given text reaches it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from typing import Any

__all__ = ["LINT_RULES", "LINT_TIMEOUT_S", "MAX_FINDINGS", "lint_source"]

LINT_RULES = "F,E9,B,C901,S,PLR0911,PLR0912,PLR0915,PLW0120,PLW0603,PLW2901"
"""Ruff rules selected: pyflakes, syntax errors, bugbear, complexity, bandit (security),
too many returns / branches / statements, and a few pylint warnings."""
LINT_TIMEOUT_S = 60.0
"""Deadline of one ruff run, in seconds."""
MAX_FINDINGS = 25
"""Most findings kept per module (the first in line order)."""
_MAX_OUTPUT_BYTES = 4 * 1024 * 1024
_SEVERITY = {"S": "high", "F": "medium", "E": "medium", "B": "medium", "PLW": "medium"}


def _severity(code: str) -> str:
    """``high``, ``medium`` or ``low`` for a ruff rule code."""
    for prefix in ("PLW", "S", "F", "E", "B"):
        if code.startswith(prefix):
            return _SEVERITY[prefix]
    return "low"  # complexity and size (C901, PLR09xx)


def lint_source(path: str, source: str) -> tuple[list[dict[str, Any]], str | None]:
    """Run ruff on ``source`` and return its findings.

    Args:
        path: The module's path, shown to ruff as the file name (``--stdin-filename``).
        source: The module's text.

    Returns:
        ``(findings, problem)``: findings in line order (at most `MAX_FINDINGS`), each
        ``{"code", "message", "line", "severity"}`` with ``severity`` ``high`` (security),
        ``medium`` (likely bugs) or ``low`` (complexity, size); ``problem`` is ``None``, or
        one line saying why there are no findings to trust (ruff missing, timed out or
        failed).
    """
    name = path.rsplit("/", 1)[-1] or "module.py"
    command = [
        sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache",
        "--output-format", "json", "--select", LINT_RULES,
        "--config", "lint.mccabe.max-complexity = 10",
        f"--stdin-filename={name}", "-",  # one token: a name like "--help.py" is no option
    ]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="clearance-lint-") as cwd:
        try:
            done = subprocess.run(
                command,
                input=source.encode("utf-8"),
                capture_output=True,
                timeout=LINT_TIMEOUT_S,
                cwd=cwd,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return [], f"ruff took more than {LINT_TIMEOUT_S:.0f} s"
        except OSError as exc:
            return [], f"ruff could not run: {exc.strerror or exc}"
    if (
        done.returncode not in (0, 1)
        or not done.stdout.strip()
        or len(done.stdout) > _MAX_OUTPUT_BYTES
    ):
        first = done.stderr.decode("utf-8", "replace").strip().splitlines()[:1]
        return [], f"ruff failed: {first[0][:200] if first else f'exit {done.returncode}'}"
    try:
        raw = json.loads(done.stdout)
    except ValueError:
        return [], "ruff's output is not JSON"
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
    findings.sort(key=lambda f: (f["line"], f["code"]))
    return findings[:MAX_FINDINGS], None
