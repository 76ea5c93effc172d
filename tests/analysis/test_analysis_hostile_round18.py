"""Hostile Python source in the input folder, through `clearance run` of the code review team.

Before:
- a function (or a module) of 1,000 to 3,000 ``elif`` branches, which CPython parses, failed
  its ``module_facts`` step with ``RecursionError``: the walkers recursed once per ``elif``
  (an ``elif`` nests in ``orelse`` with no indentation, so the 100-level indentation limit
  does not bound it); the module lost every fact, its brief and its review;
- a file the parser gives up on with ``MemoryError`` (``x = ----...1``) was reported as
  ``Does not parse: MemoryError:``, a line that says nothing;
- one comment in the module (``# ruff: noqa``, ``# flake8: noqa``, ``# noqa``) hid every
  ruff finding, ``eval(input())`` included: the reviewed file chose what its review saw;
- ``__all__ += [...]`` repeated copied the whole list each time (quadratic), and each
  ``def`` of a chain of nested ``def``s re-walked everything below it: a 4 MiB module took
  minutes where parsing it takes seconds;
- the package facts a coordinator reads listed every name of ``from . import a0, a1, ...``
  as an import of the package, and quoted a function's name whole: one module of 230 KB
  made the synthesis prompt about 57,000 tokens (a name of 100,000 characters: 25,000),
  far past the bound the estimate uses;
- grounding read ``line -3`` and ``-5 lines`` as no count at all, so a sentence citing a
  line that cannot exist reached the report.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from clearance import RunLedger
from clearance.analysis import Known, _complexity, complexity, ground, step_result_tokens
from clearance.analysis._facts import functions
from clearance.analysis._names import declared_all
from clearance.cli import app
from clearance.tokens import heuristic_tokens
from cpu_time import cpu_timer

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "code_review.yaml"

BRANCHES = 1500
ELIF_FUNCTION = (
    '"""Dispatches on a code."""\n\n\ndef dispatch(x):\n    if x == 0:\n        return 0\n'
    + "".join(f"    elif x == {i}:\n        return {i}\n" for i in range(1, BRANCHES))
)
ELIF_MODULE = (
    '"""Chooses a backend."""\nimport sys\n\nif sys.platform == "p0":\n    pass\n'
    + "".join(f'elif sys.platform == "p{i}":\n    pass\n' for i in range(1, BRANCHES))
    + "else:\n    from . import good\n\n    def fallback(y):\n        return good.f(y)\n"
)
GOOD = '"""Good module."""\n\n\ndef f(a):\n    if a:\n        return 1\n    return 2\n'


def review(tmp_path: Path, files: dict[str, str]) -> tuple[Any, dict[str, Any], str]:
    """`clearance run` of the example team on ``files``: (result, tasks by id, report)."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    db = f"sqlite:///{tmp_path / 'runs.db'}"
    out = tmp_path / "report.md"
    result = CliRunner().invoke(
        app,
        ["run", str(EXAMPLE), "--input", str(folder), "--model", "fake:m", "--db", db,
         "--output", str(out)],
        terminal_width=200,
    )  # fmt: skip
    match = re.search(r"run id: (\S+)", result.output)
    assert match, result.output
    assert "Traceback" not in result.output
    with RunLedger(db) as ledger:
        tasks = {t.task_id: t for t in ledger.tasks(match.group(1))}
    return result, tasks, out.read_text(encoding="utf-8")


def facts_of(tasks: dict[str, Any], slug: str) -> dict[str, Any]:
    task = tasks[f"facts-{slug}"]
    assert task.status == "completed", task.error
    facts: dict[str, Any] = json.loads(task.result)
    return facts


def test_long_elif_chains_get_their_facts_brief_and_review(tmp_path: Path) -> None:
    ast.parse(ELIF_FUNCTION), ast.parse(ELIF_MODULE)  # the premise: Python accepts both
    _, tasks, report = review(
        tmp_path, {"dispatch.py": ELIF_FUNCTION, "backend.py": ELIF_MODULE, "good.py": GOOD}
    )
    dispatch = facts_of(tasks, "dispatch")
    assert "parse_error" not in dispatch
    assert dispatch["most_complex"][0] == {
        "name": "dispatch", "line": 4, "lines": 2 * BRANCHES + 1, "complexity": BRANCHES + 1,
    }  # fmt: skip
    assert any(  # the same number as ruff's own C901 message
        f["code"] == "C901" and f"({BRANCHES + 1} > 10)" in f["message"]
        for f in dispatch["findings"]
    )
    backend = facts_of(tasks, "backend")
    assert "parse_error" not in backend
    assert backend["imports"] == ["good"]  # found in the last ``else`` of the chain
    assert [p["name"] for p in backend["public"]] == ["fallback"]
    assert [f["name"] for f in backend["most_complex"]] == ["fallback"]
    for slug in ("dispatch", "backend", "good"):
        for step in ("brief", "review"):
            assert tasks[f"{step}-{slug}"].status == "completed", tasks[f"{step}-{slug}"].error
    assert "`dispatch` (line 4, complexity 1501" in report


def test_a_module_the_parser_gives_up_on_is_one_line_that_says_why(tmp_path: Path) -> None:
    _, tasks, report = review(
        tmp_path, {"minus.py": "x = " + "-" * 100_000 + "1\n", "good.py": GOOD}
    )
    minus = facts_of(tasks, "minus")
    assert minus["parse_error"] == "MemoryError: too deeply nested for Python's parser"
    assert "- Does not parse: MemoryError: too deeply nested for Python's parser\n" in report
    assert facts_of(tasks, "good")["most_complex"][0]["name"] == "f"  # the others kept


def test_a_comment_in_the_reviewed_module_cannot_hide_its_findings(tmp_path: Path) -> None:
    hidden = {
        "blanket.py": "# ruff: noqa\nimport os\nx = eval(input())\n",
        "flake.py": "# flake8: noqa\nimport os\nx = eval(input())\n",
        "lines.py": "import os  # noqa\nx = eval(input())  # noqa: S307\n",
    }
    _, tasks, report = review(tmp_path, hidden)
    for slug in ("blanket", "flake", "lines"):
        facts = facts_of(tasks, slug)
        assert facts["rule_counts"] == {"F401": 1, "S307": 1}, (slug, facts["rule_counts"])
        assert facts["findings"][0]["code"] == "S307"
        assert facts["findings"][0]["severity"] == "high"
    assert report.count("high: line") == 3


def test_repeated_all_extensions_cost_one_pass() -> None:
    plus, extend = ast.parse("__all__ += ['a']\n__all__.extend(['b'])\n").body
    tree = ast.Module(body=[ast.parse("__all__ = []").body[0], *[plus, extend] * 30_000],
                      type_ignores=[])  # fmt: skip
    with cpu_timer() as cpu:
        names = declared_all(tree)
    assert cpu.seconds < 1.0  # was seconds: the list copied per statement
    assert names == ["a", "b"]


def test_a_chain_of_nested_defs_is_walked_once(monkeypatch: Any) -> None:
    depth = 98  # the parser allows 100 levels of indentation
    source = "".join("    " * i + f"def f{i}(x):\n" for i in range(depth))
    source += "    " * depth + "if x: pass\n" + "    " * depth + "x = 1; " * 40_000 + "\n"
    tree = ast.parse(source)
    # Each statement is looked at once (counted, not timed: each def walked all below it).
    seen: dict[int, int] = {}
    decisions = _complexity._decisions

    def counted(stmt: ast.stmt) -> int:
        seen[id(stmt)] = seen.get(id(stmt), 0) + 1
        return decisions(stmt)

    monkeypatch.setattr(_complexity, "_decisions", counted)
    found = functions(tree)
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt)]
    assert len(seen) == len(statements) and set(seen.values()) == {1}, max(seen.values())
    assert len(found) == depth
    by_name = {f.name.rsplit(".", 1)[-1]: f.complexity for f in found}
    assert by_name["f0"] == depth + 1 and by_name[f"f{depth - 1}"] == 2
    assert by_name == {f.name.rsplit(".", 1)[-1]: complexity(f_node)
                       for f, f_node in zip(found, _defs(tree), strict=True)}  # fmt: skip


def _defs(tree: ast.Module) -> list[ast.FunctionDef]:
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    return sorted(found, key=lambda n: n.lineno)


def test_the_package_facts_a_coordinator_reads_stay_within_their_bound(tmp_path: Path) -> None:
    long_name = "handle_" + "x" * 100_000
    branches = "".join(f"    if y == {i}:\n        return {i}\n" for i in range(12))
    many = (
        "from . import " + ", ".join(f"a{i}" for i in range(12_000)) + "\n"
        f"from . import good\n\n\ndef {long_name}(y):\n{branches}    return good.f(y)\n"
    )
    _, tasks, _ = review(tmp_path, {"many.py": many, "good.py": GOOD})
    assert facts_of(tasks, "many")["imports"][:1] == ["a0"]  # the facts keep what is written
    package = tasks["package"]
    assert package.status == "completed", package.error
    bound = step_result_tokens("package_facts", 2)
    assert bound is not None and heuristic_tokens(package.result) <= bound, len(package.result)
    assert "- many.py (" in package.result and "imports good)." in package.result
    assert "imported by 1" in package.result  # good.py: the one real import still counts
    assert "a11999" not in package.result and "x" * 100 not in package.result


def test_a_line_or_count_that_cannot_exist_fails_grounding() -> None:
    known = Known.from_facts(
        [{"module": "a.py", "slug": "a", "lines": 5, "functions": 1,
          "most_complex": [{"name": "f", "line": 3, "lines": 5, "complexity": 2}]}]
    )  # fmt: skip
    for fine in ("The function f at line 3 is long.", "The a.py module has 5 lines, not 3-5."):
        assert ground(fine, known).sentences == [fine]
    for sentence in (
        "The function f at line -3 is long.",
        "The function f at line \u22123 is long.",  # a minus sign
        "The module a.py has -5 lines.",
        "The function f at line 3" + "0" * 900 + " is long.",
    ):
        grounded = ground(sentence, known)
        assert grounded.sentences == [] and grounded.dropped == {"number": 1}, sentence
