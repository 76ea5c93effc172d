"""Helpers of the analysis tests: real packages, and ruff run as a user would run it."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from clearance.analysis import StepInput, module_facts, package_data, package_facts

REAL_PACKAGES = ("requests", "click", "jinja2")
"""Third-party packages with 10+ modules each, installed with Clearance's dependencies."""


def package_root(name: str) -> Path:
    """The folder of an installed package (the test is skipped when it is missing)."""
    module = pytest.importorskip(name)
    assert module.__file__ is not None
    return Path(module.__file__).parent


def ruff(paths: list[Path], *args: str) -> list[dict[str, Any]]:
    """Ruff's JSON findings on ``paths``, configuration files ignored."""
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--isolated", "--no-cache",
         "--output-format", "json", *args, *map(str, paths)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stderr
    found: list[dict[str, Any]] = json.loads(done.stdout)
    return found


def ruff_complexity(paths: list[Path]) -> dict[tuple[str, int], tuple[str, int]]:
    """Every function's complexity as ruff's C901 reports it: (file, line) → (name, value)."""
    found = {}
    for entry in ruff(paths, "--select", "C901", "--ignore-noqa",
                      "--config", "lint.mccabe.max-complexity = 0"):  # fmt: skip
        match = re.fullmatch(r"`(.+)` is too complex \((\d+) > 0\)", entry["message"])
        assert match, entry["message"]
        key = (str(Path(entry["filename"]).resolve()), entry["location"]["row"])
        found[key] = (match.group(1), int(match.group(2)))
    return found


def facts_of_package(name: str) -> tuple[Path, dict[str, dict[str, Any]], dict[str, Any]]:
    """``module_facts`` of every module of an installed package, and its ``package_facts``."""
    importlib.import_module(name)
    root = package_root(name)
    results: dict[str, str] = {}
    modules: dict[str, dict[str, Any]] = {}
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        facts = module_facts(
            StepInput(task_id=f"facts-{rel}", title="t", description="d",
                      files={rel: path.read_text(encoding="utf-8")}, input_name=name)
        )  # fmt: skip
        modules[rel] = facts
        results[f"facts-{rel}"] = json.dumps(facts)
    text = package_facts(
        StepInput(task_id="package", title="p", description="d", results=results,
                  input_name=name)
    )  # fmt: skip
    package = package_data(list(modules.values()), package=name)
    for i, entry in enumerate(package["look_here_first"][:5], 1):  # the text says the same
        assert f"{i}. {entry['module']}:{entry['line']}" in text
    return root, modules, package
