"""Import what a command needs: ``import clearance`` and ``clearance --help`` load no heavy
dependency they do not use (provider SDKs, Ray, MCP, OpenTelemetry, Jinja2, a SQLAlchemy
dialect other than SQLite's...)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

HEAVY = (
    "anthropic",
    "httpx",
    "jinja2",
    "jsonschema",
    "llama_cpp",
    "mcp",
    "openai",
    "opentelemetry",
    "psycopg",
    "ray",
    "sentence_transformers",
    "sqlalchemy.dialects.postgresql",
    "tiktoken",
    "torch",
)
"""Modules (and their submodules) neither import may load."""


def _cli(*args: str) -> str:
    """Code that runs ``clearance ARGS`` in process (its exit swallowed)."""
    return (
        "import sys\n"
        f"sys.argv = ['clearance', *{list(args)!r}]\n"
        "from clearance.cli import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
    )


SNIPPETS = {
    "import clearance": "import clearance",
    "clearance --help": _cli("--help"),
}

HELP_SNIPPETS = {
    "clearance --help": _cli("--help"),
    "clearance run --help": _cli("run", "--help"),
}
"""Help only describes the commands: the ledger, the store and their database stay unloaded."""


def loaded_modules(code: str) -> list[str]:
    """The modules loaded once ``code`` ran in a fresh interpreter (OTEL_* unset)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    script = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    loaded: list[str] = json.loads(done.stdout.strip().splitlines()[-1])
    return loaded


def heavy_among(modules: list[str]) -> list[str]:
    return [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]


@pytest.mark.parametrize("what", sorted(SNIPPETS))
def test_no_heavy_module_is_loaded(what: str) -> None:
    modules = loaded_modules(SNIPPETS[what])
    assert "clearance" in modules
    assert heavy_among(modules) == []


def test_the_check_catches_a_heavy_module() -> None:
    modules = loaded_modules(
        "import clearance\nimport jinja2\nimport sqlalchemy.dialects.postgresql"
    )
    assert "jinja2" in heavy_among(modules)
    assert "sqlalchemy.dialects.postgresql" in heavy_among(modules)


def test_import_clearance_loads_only_the_lazy_namespace() -> None:
    """Each public name imports its module on first use (PEP 562), none at import."""
    modules = loaded_modules("import clearance")
    assert [m for m in modules if m.startswith("clearance")] == [
        "clearance",
        "clearance._core",
        "clearance._core.lazy",
    ]


def test_a_public_name_loads_on_first_use() -> None:
    modules = loaded_modules("import clearance\nclearance.RunLedger")
    assert "clearance._state.ledger" in modules
    assert "sqlalchemy" in modules


@pytest.mark.parametrize("what", sorted(HELP_SNIPPETS))
def test_help_loads_no_database_layer(what: str) -> None:
    modules = loaded_modules(HELP_SNIPPETS[what])
    assert "clearance.cli" in modules
    unwanted = ("sqlalchemy", "clearance._state.ledger", "clearance._state.store")
    assert [m for m in modules if m.split(".")[0] == "sqlalchemy" or m in unwanted] == []
