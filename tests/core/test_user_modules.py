"""`import_user_module`: installed modules first, the current folder for the named module only."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from clearance._core.user_modules import import_user_module


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", ".", str(tmp_path))])
    yield tmp_path
    for name in [n for n in sys.modules if n.startswith("cl_probe")]:
        del sys.modules[name]


def test_a_module_of_the_current_folder_is_imported_by_its_name(folder: Path) -> None:
    (folder / "cl_probe_tools.py").write_text("def f():\n    return 7\n")
    assert import_user_module("cl_probe_tools").f() == 7
    assert str(folder) not in sys.path


def test_a_package_of_the_current_folder_with_its_submodules(folder: Path) -> None:
    (folder / "cl_probe_pkg").mkdir()
    (folder / "cl_probe_pkg" / "__init__.py").write_text("")
    (folder / "cl_probe_pkg" / "steps.py").write_text("def g():\n    return 'g'\n")
    assert import_user_module("cl_probe_pkg.steps").g() == "g"


def test_an_installed_module_wins_over_a_file_of_the_same_name(folder: Path) -> None:
    (folder / "json.py").write_text("raise SystemExit('the folder json was imported')\n")
    assert import_user_module("json").dumps([1]) == "[1]"


def test_what_the_named_module_imports_is_not_searched_in_the_folder(folder: Path) -> None:
    (folder / "cl_probe_dep.py").write_text("VALUE = 1\n")
    (folder / "cl_probe_user.py").write_text("import cl_probe_dep\n")
    with pytest.raises(ModuleNotFoundError) as caught:
        import_user_module("cl_probe_user")
    assert caught.value.name == "cl_probe_dep"
    assert "cl_probe_user" not in sys.modules  # a failed import leaves nothing behind


def test_a_module_nowhere_names_where_it_was_looked_for(folder: Path) -> None:
    with pytest.raises(ModuleNotFoundError, match="installed or in the current folder"):
        import_user_module("cl_probe_missing.sub")


@pytest.mark.parametrize(
    "name", ["", ".cl_probe_x", "../cl_probe_x", "cl_probe_x/y", "cl_probe_x..y"]
)
def test_a_name_that_is_not_a_module_name_imports_nothing(folder: Path, name: str) -> None:
    (folder / "cl_probe_x.py").write_text("raise SystemExit('imported')\n")
    with pytest.raises(ValueError, match="is not a module name"):
        import_user_module(name)
    assert "cl_probe_x" not in sys.modules
