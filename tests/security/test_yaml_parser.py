"""Team files read through libyaml's parser, with the caps checked as the nodes are composed.

The loader takes its events from libyaml (C) and composes the nodes in Python, checking each
cap per node. These attacks check that what the pure-Python loader refused is still refused,
with the same one-line messages, and that what it loaded still loads to the same value.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clearance import ConfigError
from clearance._core.safe_yaml import MAX_YAML_DEPTH, _LimitedLoader, load_yaml_file


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "team.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_events_come_from_libyaml() -> None:
    from yaml._yaml import CParser

    assert CParser in _LimitedLoader.__mro__


@pytest.mark.parametrize("depth", [MAX_YAML_DEPTH + 1, 500, 999])
def test_flow_nesting_under_libyamls_own_cap_meets_ours(tmp_path: Path, depth: int) -> None:
    path = write(tmp_path, "x: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigError, match=f"nested more than {MAX_YAML_DEPTH} levels deep"):
        load_yaml_file(path)


@pytest.mark.parametrize("depth", [1001, 20_000])
def test_flow_nesting_past_libyamls_cap_is_named_as_nesting(tmp_path: Path, depth: int) -> None:
    path = write(tmp_path, "x: " + "{a: " * depth + "1" + "}" * depth + "\n")
    with pytest.raises(ConfigError, match=f"nested more than {MAX_YAML_DEPTH} levels deep"):
        load_yaml_file(path)


def test_block_nesting_past_the_cap_is_refused(tmp_path: Path) -> None:
    text = "".join("  " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH + 2)) + "  " * 70 + "v\n"
    with pytest.raises(ConfigError, match=f"nested more than {MAX_YAML_DEPTH} levels deep"):
        load_yaml_file(write(tmp_path, text))


def test_an_alias_to_its_own_ancestor_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "a: &x\n  b: [1, *x]\n")
    with pytest.raises(ConfigError, match="refers to itself"):
        load_yaml_file(path)


@pytest.mark.parametrize(
    "text",
    ["a: \x07bell\n", "a: [1, 2\n", "a: b: c\n", "\ta: 1\n", "a: 'open\n", "- a\nb: 1\n"],
)
def test_malformed_yaml_is_one_config_error_with_its_line(tmp_path: Path, text: str) -> None:
    with pytest.raises(ConfigError, match=r"not valid YAML \(line \d+\)"):
        load_yaml_file(write(tmp_path, text))


def test_values_load_as_the_safe_loader_loads_them(tmp_path: Path) -> None:
    text = (
        "name: t\nwhen: 2026-11-26\nbig: 123456789012345678901234567890\nyes_word: yes\n"
        "nothing: ~\nfloat: .5\nnan: .nan\noctal: 0o17\nmulti: |\n  line one\n  line two\n"
        'folded: >\n  a\n  b\nanchors: {a: &a [1, 2], b: *a}\nunicode: "caf\\u00e9 \U0001f600"\n'
        "dup: 1\ndup: 2\n"
    )
    loaded = load_yaml_file(write(tmp_path, text))
    expected = yaml.safe_load(text)
    nan = loaded.pop("nan")
    expected.pop("nan")
    assert nan != nan  # a NaN
    assert loaded == expected
    assert loaded["dup"] == 2 and loaded["multi"] == "line one\nline two\n"


def test_python_tags_are_refused_as_by_the_safe_loader(tmp_path: Path) -> None:
    path = write(tmp_path, "x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml_file(path)
