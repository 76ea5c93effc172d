"""The "look here first" ranking: complexity and size lead, repeats collapse, no noise."""

from __future__ import annotations

import json

import pytest
from analysis_real import REAL_PACKAGES, facts_of_package, ruff_complexity

from clearance.analysis import StepInput, module_facts, package_data, package_facts

NOISE = {"S101", "S110", "S112", "S311"}


@pytest.mark.parametrize("name", REAL_PACKAGES)
def test_the_top_ten_of_a_real_package_holds_its_most_complex_functions(name):
    root, modules, package = facts_of_package(name)
    assert len(modules) >= 10
    top = package["look_here_first"]
    assert len(top) == 10
    truth = ruff_complexity(sorted(root.rglob("*.py")))
    ranked = sorted(truth.items(), key=lambda kv: -kv[1][1])
    third = ranked[2][1][1]
    must = {(k[0], k[1]) for k, v in ranked if v[1] > third}  # strictly above the third
    shown = {(str((root / e["module"]).resolve()), e["line"]) for e in top}
    assert must <= shown
    at_least_third = [e for e in top if e["kind"] == "function" and e["complexity"] >= third]
    assert len(at_least_third) >= 3
    for entry in at_least_third:  # the number shown is ruff's
        key = (str((root / entry["module"]).resolve()), entry["line"])
        assert truth[key][1] == entry["complexity"]
        assert f"complexity {entry['complexity']}," in entry["why"]
    # Complexity leads: the first entry is the package's most complex function or close.
    assert top[0]["kind"] == "function" and top[0]["complexity"] >= ranked[2][1][1]
    # No rule that needs context, no unused import of a module that re-exports.
    for entry in top:
        assert entry.get("code") not in NOISE
        if entry.get("code") == "F401":
            facts = modules[entry["module"]]
            assert not entry["module"].endswith("__init__.py")
            assert not facts.get("all_declared")
    # One line per rule per module.
    pairs = [(e["module"], e["code"]) for e in top if e["kind"] == "finding"]
    assert len(pairs) == len(set(pairs))


def facts(files: dict[str, str]) -> dict[str, str]:
    return {
        f"facts-{path}": json.dumps(
            module_facts(StepInput(task_id=f"facts-{path}", title="t", description="d",
                                   files={path: text}, input_name="pkg"))
        )
        for path, text in files.items()
    }  # fmt: skip


def test_repeats_collapse_and_context_free_hits_are_left_out():
    names = [f"name{i}" for i in range(24)]
    compat = "".join(f"from os.path import {n}\n" for n in names)  # 24 unused: re-exports
    users = "from .compat import " + ", ".join(names[:3]) + "\n\nX = name0, name1, name2\n"
    util = "import os\nimport re\nimport sys\n\n\ndef f(x):\n    assert x\n    try:\n" \
           "        return x()\n    except Exception:\n        pass\n"  # fmt: skip
    branches = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(14))
    big = f"import random\n\n\ndef g(x):\n{branches}    return random.random()\n"
    results = facts({"compat.py": compat, "users.py": users, "util.py": util, "big.py": big})
    text = package_facts(StepInput(task_id="p", title="p", description="d",
                                   results=results, input_name="pkg"))  # fmt: skip
    top = package_data([json.loads(v) for v in results.values()])["look_here_first"]
    assert "1. big.py:4 g: complexity 15, 30 lines" in text
    whys = [e["why"] for e in top]
    assert top[0]["symbol"] == "g" and top[0]["complexity"] == 15  # complexity leads
    assert [e["module"] for e in top if e.get("code") == "F401"] == ["util.py"]
    assert any(w.startswith("3x F401 in util.py") for w in whys)  # one line for three
    assert not any(e.get("code") in NOISE for e in top)  # S101, S110, S311 are facts only
    util_facts = json.loads(results["facts-util.py"])
    assert {"S101", "S110"} <= set(util_facts["rule_counts"])
    compat_facts = json.loads(results["facts-compat.py"])
    assert compat_facts["rule_counts"] == {"F401": 24}
