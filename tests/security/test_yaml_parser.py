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
        "base: &b {x: 1, y: 2}\nmerged: {<<: *b, y: 3}\nkinds: {1: int, '1': text}\n"
    )
    loaded = load_yaml_file(write(tmp_path, text))
    expected = yaml.safe_load(text)
    nan = loaded.pop("nan")
    expected.pop("nan")
    assert nan != nan  # a NaN
    assert loaded == expected
    assert loaded["multi"] == "line one\nline two\n"
    # A merged-in key is overridden by the mapping's own: no key is given twice.
    assert loaded["merged"] == {"x": 1, "y": 3}
    assert loaded["kinds"] == {1: "int", "1": "text"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tasks: [a]\nname: t\ntasks: [b]\n", "the key 'tasks' is given twice (lines 1 and 3)"),
        ("a:\n  b: 1\n  b: 2\n", "the key 'b' is given twice (lines 2 and 3)"),
        ("x: {k: 1, k: 2}\n", "the key 'k' is given twice (line 1)"),
        # Compared as loaded: one key written two ways.
        ("x: {1: a, 0x1: b}\n", "the key 1 is given twice (line 1)"),
        ("x: {true: a, yes: b}\n", "the key True is given twice (line 1)"),
        ("~: a\nnull: b\n", "the key None is given twice (lines 1 and 2)"),
        # A mapping merged in with << is still checked for its own keys.
        ("base: &b {x: 1, x: 2}\ny: {<<: *b}\n", "the key 'x' is given twice (line 1)"),
    ],
)
def test_a_key_given_twice_is_refused(tmp_path: Path, text: str, message: str) -> None:
    # PyYAML keeps the last value without a word (a second tasks: list would replace the
    # first); YAML itself requires a mapping's keys to be unique.
    with pytest.raises(ConfigError) as info:
        load_yaml_file(write(tmp_path, text))
    assert str(info.value).endswith(message)


def test_a_merge_source_used_twice_is_not_a_key_given_twice(tmp_path: Path) -> None:
    # PyYAML rewrites a merging mapping's pairs (merged keys first) while it constructs the
    # value; the check runs on the mappings as written, so a rewritten pair list never counts.
    text = "x:\n  mid: &m\n    <<: {a: 1}\n    a: 2\ny:\n  <<: *m\n  b: 3\nz: {<<: *m}\n"
    assert load_yaml_file(write(tmp_path, text)) == yaml.safe_load(text)


def test_python_tags_are_refused_as_by_the_safe_loader(tmp_path: Path) -> None:
    path = write(tmp_path, "x: !!python/object/apply:os.system ['true']\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_yaml_file(path)
