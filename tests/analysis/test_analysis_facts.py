"""Module facts are true to the source: each count is checked against ruff or `ast` itself."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import textwrap
from collections import Counter
from pathlib import Path

from analysis_real import REAL_PACKAGES, package_root, ruff, ruff_complexity

from clearance.analysis import (
    StepInput,
    complexity,
    fan_in,
    lint_source,
    module_facts,
    module_structure,
)
from clearance.analysis._facts import functions
from clearance.analysis._lint import MAX_FINDINGS
from clearance.analysis._target import target_from_specifier

JSON_DIR = Path(json.__file__).parent

NESTED = '''\
"""Defs in every place a def can sit."""
import sys

if sys.version_info >= (3, 12):
    def picked(x):
        return x
else:
    def picked(x):
        if x:
            return 1
        return 0

try:
    from fastjson import loads
except ImportError:
    def loads(text):
        return text

class Outer:
    def method(self, a, b):
        def inner(c):
            for i in c:
                if i and a or b:
                    yield i
        while a:
            try:
                a -= 1
            except ValueError:
                break
            else:
                continue
        return inner

    class Inner:
        async def deep(self, v):
            match v:
                case 1:
                    return "one"
                case [x, *_] if x:
                    return "list"
                case _:
                    return "other"

with open(__file__) as _f:
    def in_with():
        return [y for y in range(3) if y] if _f else None
'''


def write(root: Path, files: dict[str, str]) -> list[Path]:
    paths = []
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        paths.append(path)
    return paths


def defs_in(tree: ast.AST) -> int:
    return sum(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) for n in ast.walk(tree))


def test_every_def_is_counted_wherever_it_is_nested(tmp_path):
    facts = module_structure("nested.py", NESTED)
    assert facts["functions"] == defs_in(ast.parse(NESTED)) == 7
    names = [f.name for f in functions(ast.parse(NESTED))]
    assert names == ["picked", "picked", "loads", "Outer.method", "Outer.method.inner",
                     "Outer.Inner.deep", "in_with"]  # fmt: skip
    assert facts["most_complex"][0]["name"] == "Outer.method"


def test_complexity_is_ruffs_c901_on_hand_made_and_real_modules(tmp_path):
    paths = write(tmp_path, {"nested.py": NESTED})
    real = sorted(JSON_DIR.glob("*.py"))
    for name in REAL_PACKAGES:
        real += sorted(package_root(name).rglob("*.py"))
    expected = ruff_complexity(paths + real)
    ours = {}
    for path in paths + real:
        for fn in functions(ast.parse(path.read_text(encoding="utf-8"))):
            ours[(str(path.resolve()), fn.line)] = (fn.name.rsplit(".", 1)[-1], fn.complexity)
    assert len(expected) > 1500  # every def of four packages and the hand-made module
    assert ours == expected
    method = ast.parse(NESTED).body[4].body[0]  # Outer.method: while, except, else, def, for, if
    assert isinstance(method, ast.FunctionDef) and complexity(method) == 7


def test_all_and_re_exports_are_the_public_names(tmp_path):
    facts = module_structure(
        "__init__.py",
        textwrap.dedent('''\
            """A package."""
            from .a import One, two
            from .b import three as three
            from ._c import hidden
            __all__ = ["One", "two"]
            __all__ += ["VERSION"]
            __all__.extend(["missing"])
            VERSION = "1"
        '''),
    )
    assert facts["all_declared"] is True
    assert [(p["name"], p["kind"]) for p in facts["public"]] == [
        ("One", "re-export"), ("two", "re-export"), ("VERSION", "constant"),
        ("missing", "unbound"),
    ]  # fmt: skip
    assert facts["public"][0]["from"] == ".a"
    without = module_structure(
        "__init__.py", "from .a import One\nfrom os import path\nimport re as re\nX = 1\n"
    )
    assert [p["name"] for p in without["public"]] == ["One", "re", "X"]


def test_public_names_match_the_real_all_of_each_module():
    checked = 0
    for name in (*REAL_PACKAGES, "urllib3"):
        root = package_root(name)
        for path in sorted(root.rglob("*.py")):
            rel = path.relative_to(root).with_suffix("")
            dotted = ".".join((name, *rel.parts)).removesuffix(".__init__")
            try:
                module = importlib.import_module(dotted)
            except Exception:  # a platform's module (Windows consoles)
                continue
            facts = module_structure(path.name, path.read_text(encoding="utf-8"))
            if hasattr(module, "__all__"):
                assert facts["all_declared"], dotted
                assert facts["public_count"] == len(set(module.__all__)), dotted
                shown = [p["name"] for p in facts["public"]]
                assert shown == list(dict.fromkeys(module.__all__))[: len(shown)], dotted
                checked += 1
    assert checked >= 4


def test_a_package_that_re_exports_without_all_lists_its_re_exports():
    jinja2 = importlib.import_module("jinja2")
    root = package_root("jinja2")
    facts = module_structure("__init__.py", (root / "__init__.py").read_text(encoding="utf-8"))
    exported = {
        n for n in dir(jinja2)
        if not n.startswith("_") and not inspect.ismodule(getattr(jinja2, n))
    }  # fmt: skip
    assert not facts["all_declared"]
    assert facts["public_count"] == len(exported) > 25
    assert {p["kind"] for p in facts["public"]} == {"re-export"}


def test_type_checking_imports_are_shown_apart_and_do_not_count_as_fan_in(tmp_path):
    a = "X = 1\n"
    b = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import X\n"
    c = "import typing\nfrom . import d\nif typing.TYPE_CHECKING:\n    from .a import X\n"
    d = "def f():\n    from .a import X\n    return X\n"
    facts = [module_structure(n, s, package="pkg")
             for n, s in (("a.py", a), ("b.py", b), ("c.py", c), ("d.py", d))]  # fmt: skip
    by = {f["module"]: f for f in facts}
    assert by["b.py"]["imports"] == [] and by["b.py"]["type_imports"] == ["a"]
    assert by["c.py"]["imports"] == ["d"] and by["c.py"]["type_imports"] == ["a"]
    assert by["d.py"]["imports"] == ["a"]  # a lazy import runs: it counts
    assert fan_in(facts) == {"a": 1, "b": 0, "c": 0, "d": 1}


def test_findings_are_capped_by_severity_and_counted_in_full_as_ruff_counts_them(tmp_path):
    imports = "".join(f"import mod{i}\n" for i in range(40))
    source = f"{imports}\n\ndef f(y):\n    assert y\n    return eval(y)\n"
    (path,) = write(tmp_path, {"many.py": source})
    lint = lint_source("many.py", source)
    truth = ruff([path], "--select", "F,E9,B,C901,S,PLR0911,PLR0912,PLR0915,PLW0120,PLW0603,"
                 "PLW2901", "--config", "lint.mccabe.max-complexity = 10")  # fmt: skip
    assert lint.total == len(truth) == 42
    assert lint.counts == dict(sorted(Counter(e["code"] for e in truth).items()))
    assert len(lint.findings) == MAX_FINDINGS
    assert lint.findings[0]["code"] == "S307"  # eval, on the last line, shown first
    assert lint.findings[-1]["severity"] == "medium"  # S101 (context) is past the cap
    facts = module_facts(StepInput(task_id="t", title="t", description="d",
                                   files={"many.py": source}))  # fmt: skip
    assert (facts["findings_total"], len(facts["findings"])) == (42, MAX_FINDINGS)
    assert facts["rule_counts"] == {"F401": 40, "S101": 1, "S307": 1}


def test_lines_and_sizes_match_the_source():
    source = (JSON_DIR / "decoder.py").read_text(encoding="utf-8")
    facts = module_structure("decoder.py", source, package="json")
    assert facts["lines"] == len(source.splitlines())
    assert facts["functions"] == defs_in(ast.parse(source))
    assert facts["bytes"] == len(source.encode("utf-8"))


def test_the_target_version_comes_from_requires_python(tmp_path):
    assert target_from_specifier(">=3.8") == "py38"
    assert target_from_specifier(">=3.8, !=3.9.0") == "py38"
    assert target_from_specifier(">3.9") == "py310"
    assert target_from_specifier(">=2.7, <4") is None
    source = "def f(a, b):\n    return list(zip(a, b))\n"
    assert [f["code"] for f in lint_source("z.py", source, target_version="py38").findings] == []
    assert [f["code"] for f in lint_source("z.py", source, target_version="py310").findings] == [
        "B905"
    ]
    facts = module_facts(StepInput(task_id="t", title="t", description="d",
                                   files={"z.py": source}, input_name="click"))  # fmt: skip
    assert facts["python_target"]["source"].startswith("Requires-Python")
