"""The model registry: one table of providers, each imported by name on first use."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from clearance._core.errors import ConfigError
from clearance.models import PROVIDERS, get_model


def run_python(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def test_fake_ids_work_without_importing_the_testing_package_first() -> None:
    out = run_python(
        """
        import sys
        import clearance.models
        assert "clearance.testing" not in sys.modules, "models imported the testing package"
        model = clearance.models.get_model("fake:echo")
        print(type(model).__module__, type(model).__name__)
        """
    )
    assert out == "clearance.testing._fake FakeModel"


@pytest.mark.parametrize(
    "model_id",
    [
        "os:path",
        "clearance.testing._fake:FakeModel",
        "subprocess:run",
        "builtins:eval",
        "FAKE:echo",
        " fake:echo",
    ],
)
def test_a_provider_outside_the_table_is_refused_and_nothing_is_imported(
    model_id: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    imported: list[str] = []
    import importlib

    real = importlib.import_module
    monkeypatch.setattr(
        importlib, "import_module", lambda name, *a: imported.append(name) or real(name, *a)
    )
    with pytest.raises(ConfigError) as info:
        get_model(model_id)
    assert info.value.field == "model"
    assert imported == []


def test_unknown_provider_error_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="unknown model provider 'nope'") as info:
        get_model("nope:x")
    for provider in PROVIDERS:
        assert provider in str(info.value)
