"""``for_each_file`` patterns: gitignore-style matching anchored at the input folder."""

import json
from pathlib import Path

import pytest

from clearance import ConfigError
from clearance._core.for_each_file import matching_files
from clearance._core.teamfile import load_team_file


def files_for(tmp_path: Path, pattern: str) -> list[str]:
    """The ``files`` of the tasks a ``for_each_file: pattern`` task expands to, in order."""
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents: [{name: a, instructions: hi}]\n"
        "tasks:\n"
        f"  - {{id: 't-{{slug}}', title: T, description: D, assignee: a,\n"
        f"     files: ['{{path}}'], for_each_file: {json.dumps(pattern)}}}\n",
        encoding="utf-8",
    )
    loaded = load_team_file(path, input_dir=tmp_path / "in")
    return [t.files[0] for t in loaded.tasks]


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "in"
    (root / "pkg" / "sub").mkdir(parents=True)
    for rel in ("top.py", "notes.txt", "pkg/a.py", "pkg/sub/b.py", "pkg/sub/c.txt"):
        (root / rel).write_text("x = 1\n", encoding="utf-8")
    return root


def test_double_star_spans_folders_and_the_top(tmp_path: Path, tree: Path) -> None:
    assert files_for(tmp_path, "**/*.py") == ["pkg/a.py", "pkg/sub/b.py", "top.py"]
    assert files_for(tmp_path, "pkg/**/*.py") == ["pkg/a.py", "pkg/sub/b.py"]


def test_a_single_star_stays_in_one_folder(tmp_path: Path, tree: Path) -> None:
    assert files_for(tmp_path, "*.py") == ["top.py"]
    assert files_for(tmp_path, "pkg/*") == ["pkg/a.py"]


def test_escaped_and_bracketed_specials_match_literally(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for name in ("st*r.py", "stxr.py", "[draft].md", "d.md"):
        (root / name).write_text("", encoding="utf-8")

    def names(pattern: str) -> list[str]:
        return [p.name for p in matching_files(root, pattern, ["*"], "tasks.0.for_each_file")]

    assert names("st\\*r.py") == ["st*r.py"]
    assert names("st[*]r.py") == ["st*r.py"]
    assert names("[[]draft].md") == ["[draft].md"]
    assert names("st*r.py") == ["st*r.py", "stxr.py"]


def test_a_pattern_matching_nothing_names_the_pattern_and_field(tmp_path: Path, tree: Path) -> None:
    with pytest.raises(ConfigError) as info:
        files_for(tmp_path, "**/*.rs")
    assert "matches '**/*.rs'" in str(info.value)
    assert "tasks.0.for_each_file" in str(info.value)


def test_attack_a_symlinked_folder_out_of_the_input_is_not_followed(
    tmp_path: Path, tree: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.py").write_text("KEY = 1\n", encoding="utf-8")
    (tree / "link").symlink_to(outside, target_is_directory=True)
    found = files_for(tmp_path, "**/*.py")
    assert found == ["pkg/a.py", "pkg/sub/b.py", "top.py"]
    with pytest.raises(ConfigError, match="no file under"):
        files_for(tmp_path, "link/*.py")


# -- {slug}: always fit for a task id ---------------------------------------------------------


@pytest.mark.parametrize(
    ("rel", "slug"),
    [
        ("a.py", "a"),
        ("pkg/json/decoder.py", "pkg.json.decoder"),
        ("we ird$.txt", "we-ird"),
        ("dir.v2/file", "dir.v2.file"),  # a dot in a folder's name is no suffix
        ("noext", "noext"),
        (".hidden", "file"),
        ("é/ü.md", "file"),
    ],
)
def test_a_slug_is_the_path_made_fit_for_an_id(rel: str, slug: str) -> None:
    from clearance._core.for_each_file import file_slug

    assert file_slug(rel) == slug


def test_a_long_path_gives_a_slug_that_fits_and_stays_distinct() -> None:
    from clearance._core.for_each_file import file_slug

    one, two = file_slug("d/" + "x" * 200 + "1.txt"), file_slug("d/" + "x" * 200 + "2.txt")
    assert len(one) <= 96 and len(two) <= 96 and one != two


def test_an_odd_file_name_does_not_break_a_for_each_file_task(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    for name in ("we ird$.txt", "plain.txt", "café (1).txt"):
        (root / name).write_text("x", encoding="utf-8")
    path = tmp_path / "team.yaml"
    path.write_text(
        "agents: [{name: a, instructions: hi}]\n"
        "tasks:\n"
        "  - {id: 'f-{slug}', title: 'Read {name}', description: D, assignee: a,\n"
        "     files: ['{path}'], for_each_file: '*.txt'}\n",
        encoding="utf-8",
    )
    loaded = load_team_file(path, input_dir=root)
    assert {t.id: t.files[0] for t in loaded.tasks} == {
        "f-caf-1": "café (1).txt",
        "f-plain": "plain.txt",
        "f-we-ird": "we ird$.txt",
    }
    assert {t.title for t in loaded.tasks} >= {"Read we ird$.txt"}  # the name itself, unchanged


def test_names_one_unicode_normalization_apart_are_refused(tmp_path: Path) -> None:
    import unicodedata

    root = tmp_path / "in"
    root.mkdir()
    (root / unicodedata.normalize("NFC", "café.txt")).write_text("1", encoding="utf-8")
    try:
        (root / unicodedata.normalize("NFD", "café.txt")).write_text("2", encoding="utf-8")
    except OSError:  # pragma: no cover - a file system that normalizes names
        pytest.skip("the file system holds one of the two names only")
    if len(list(root.iterdir())) < 2:  # pragma: no cover
        pytest.skip("the file system normalizes names")
    # Both would be tasks titled and described alike ("Read café.txt"): refused, named.
    with pytest.raises(ConfigError, match="differ only in Unicode normalization"):
        files_for(tmp_path, "*.txt")
