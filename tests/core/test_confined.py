"""The confined reader and writer: links resolved beneath the root, writes never follow."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from clearance import ConfigError, LimitExceeded, PathEscapeError
from clearance._core.confined import (
    MAX_SYMLINKS,
    list_confined,
    make_dir_confined,
    make_dir_exclusive,
    read_bytes_confined,
    read_text_confined,
    split_relative,
    walk_confined,
    write_confined,
)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    base = tmp_path / "root"
    (base / "a" / "b").mkdir(parents=True)
    (base / "a" / "b" / "f.txt").write_text("F")
    (tmp_path / "secret.txt").write_text("SECRET")
    return base


def test_split_relative_refuses_what_could_leave_the_root() -> None:
    assert split_relative("./a//b/") == ("a", "b")
    assert split_relative("") == ()
    for bad in ("/a", "a/../b", "a\\..\\b", "..", "a\x00b", "C:\\x", "\udcff"):
        with pytest.raises(PathEscapeError):
            split_relative(bad)
    assert split_relative("a:b") == ("a:b",)  # a legal name on POSIX


def test_links_beneath_the_root_are_followed_and_outside_refused(root: Path) -> None:
    (root / "rel").symlink_to("a/b/f.txt")
    (root / "abs").symlink_to(root / "a" / "b" / "f.txt")
    (root / "a" / "up").symlink_to("../a/b")
    (root / "out").symlink_to("../secret.txt")
    (root / "a" / "b" / "deep").symlink_to("../../../secret.txt")
    for rel in ("rel", "abs", "a/up/f.txt"):
        assert read_bytes_confined(root, rel, max_bytes=10).data == b"F"
    for rel in ("out", "a/b/deep"):
        with pytest.raises(PathEscapeError):
            read_bytes_confined(root, rel, max_bytes=10)
    with pytest.raises(PathEscapeError, match="not followed"):
        read_bytes_confined(root, "rel", max_bytes=10, follow_symlinks=False)


def test_a_chain_longer_than_the_limit_is_refused(root: Path) -> None:
    (root / "l0").symlink_to("a/b/f.txt")
    for i in range(1, MAX_SYMLINKS + 1):
        (root / f"l{i}").symlink_to(f"l{i - 1}")
    assert read_bytes_confined(root, f"l{MAX_SYMLINKS - 1}", max_bytes=1).data == b"F"
    with pytest.raises(PathEscapeError, match="more than"):
        read_bytes_confined(root, f"l{MAX_SYMLINKS}", max_bytes=1)


def test_reads_stop_at_the_cap_and_report_the_true_size(root: Path) -> None:
    (root / "ten.txt").write_text("0123456789")
    read = read_bytes_confined(root, "ten.txt", max_bytes=4)
    assert (read.data, read.size, read.truncated) == (b"0123", 10, True)
    assert not read_bytes_confined(root, "ten.txt", max_bytes=10).truncated
    with pytest.raises(LimitExceeded) as info:
        read_text_confined(root, "ten.txt", max_bytes=9)
    assert (info.value.value, info.value.maximum) == (10, 9)
    with pytest.raises(ConfigError, match="does not exist"):
        read_bytes_confined(root, "missing.txt", max_bytes=1)
    with pytest.raises(ConfigError, match="folder"):
        read_bytes_confined(root, "a", max_bytes=1)


def test_writes_never_follow_links_and_never_overwrite_hard_links(
    root: Path, tmp_path: Path
) -> None:
    write_confined(root, "new/deep/x.txt", b"X", make_parents=True)
    assert (root / "new" / "deep" / "x.txt").read_bytes() == b"X"
    with pytest.raises(ConfigError, match="already exists"):
        write_confined(root, "new/deep/x.txt", b"Y")
    write_confined(root, "new/deep/x.txt", b"Y", exclusive=False)
    assert (root / "new" / "deep" / "x.txt").read_bytes() == b"Y"

    (root / "to-secret").symlink_to(tmp_path / "secret.txt")
    (root / "dir-out").symlink_to(tmp_path)
    os.link(tmp_path / "secret.txt", root / "hard.txt")
    for rel in ("to-secret", "dir-out/planted.txt"):
        with pytest.raises((PathEscapeError, ConfigError)):
            write_confined(root, rel, b"PLANTED", exclusive=False, make_parents=True)
    with pytest.raises(ConfigError, match="single link"):
        write_confined(root, "hard.txt", b"PLANTED", exclusive=False)
    assert (tmp_path / "secret.txt").read_text() == "SECRET"
    assert not (tmp_path / "planted.txt").exists()


def test_folders_are_created_exclusively(root: Path, tmp_path: Path) -> None:
    made = make_dir_exclusive(tmp_path / "parents" / "made")
    assert made.is_dir() and made == (tmp_path / "parents").resolve() / "made"
    with pytest.raises(ConfigError, match="already exists"):
        make_dir_exclusive(made)
    make_dir_confined(root, "a/c")
    make_dir_confined(root, "a/c", exist_ok=True)
    with pytest.raises(ConfigError):
        make_dir_confined(root, "a/c")
    (root / "link").symlink_to(tmp_path)
    with pytest.raises(PathEscapeError):
        make_dir_confined(root, "link", exist_ok=True)


def test_listing_reports_links_without_following_them(root: Path, tmp_path: Path) -> None:
    (root / "out").symlink_to(tmp_path)
    os.mkfifo(root / "pipe")
    kinds = {e.name: e.kind for e in list_confined(root)}
    assert kinds == {"a": "dir", "out": "symlink", "pipe": "other"}
    walked = [(e.path, e.depth) for e in walk_confined(root, max_depth=5)]
    assert walked == [("a", 1), ("a/b", 2), ("a/b/f.txt", 3), ("out", 1), ("pipe", 1)]
    assert [e.size for e in walk_confined(root, "a/b", max_depth=1)] == [1]
