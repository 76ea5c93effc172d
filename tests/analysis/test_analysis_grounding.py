"""Grounding: invented names, codes and code blocks never reach a report; they are counted."""

from __future__ import annotations

import json
from pathlib import Path

from clearance.analysis import StepInput, module_facts
from clearance.analysis._grounding import Known, ground

JSON_DIR = Path(json.__file__).parent


def known_json() -> Known:
    modules = []
    for path in sorted(JSON_DIR.glob("*.py")):
        modules.append(
            module_facts(StepInput(task_id="t", title="t", description="d",
                                   files={path.name: path.read_text(encoding="utf-8")},
                                   input_name="json"))
        )  # fmt: skip
    return Known.from_facts(modules)


def test_real_names_pass_and_invented_ones_are_dropped_and_counted():
    known = known_json()
    text = "\n".join([
        "- The `decoder.py` module defines `JSONDecoder` and its `raw_decode` method.",
        "- `py_make_scanner` in scanner.py builds the scanner.",
        "Errors raise JSONDecodeError from json.decoder.",
        "The function parse_everything_fast() is too complex.",  # invented
        "Rule S102.5 applies to the encoder.",  # invented code
        "See utils.py for helpers.",  # no such module
        "It uses `JSONEncoder.magic_method` heavily.",  # invented method
        "```python",
        "# noinspection PyUnresolvedReferences",
        "def fake():",
        "    pass",
        "```",
        "~~~~",
        "# noinspection PyBroadException",
        "    x = compute()",
        "This package is small and well organised.",
    ])  # fmt: skip
    grounded = ground(text, known)
    assert grounded.sentences == [
        "The `decoder.py` module defines `JSONDecoder` and its `raw_decode` method.",
        "`py_make_scanner` in scanner.py builds the scanner.",
        "Errors raise JSONDecodeError from json.decoder.",
        "This package is small and well organised.",
    ]
    assert grounded.dropped == {"name": 3, "rule code": 1, "code": 4}
    assert grounded.dropped_count == 8
    assert "```" not in grounded.text and "noinspection" not in grounded.text


def test_rule_codes_must_be_findings_of_the_package():
    known = Known(modules=frozenset({"m.py", "m"}), symbols=frozenset({"f"}),
                  codes=frozenset({"F401"}))  # fmt: skip
    assert ground("F401 in m.py is an unused import.", known).dropped_count == 0
    assert ground("B905 in m.py needs strict.", known).dropped == {"rule code": 1}
    assert ground("Use e.g. a dict, i.e. a mapping.", known).dropped_count == 0


def test_cut_off_and_repeated_sentences_are_dropped_and_counted():
    known = Known(modules=frozenset({"m.py"}), symbols=frozenset({"f"}), codes=frozenset())
    text = (
        "It parses JSON. It provides an easy way to parse, manipulate, or create new,\n"
        "It parses JSON.\nThe final answer to the goal is:"
    )
    grounded = ground(text, known)
    assert grounded.sentences == ["It parses JSON."]
    assert grounded.dropped == {"incomplete": 2, "repeat": 1}
    seen = {"it parses json."}
    assert ground("It parses JSON.", known, seen).dropped == {"repeat": 1}


def test_counts_must_be_the_named_modules_and_sentences_about_the_prompt_are_dropped():
    known = known_json()
    kept = ground("The encoder.py module has 443 lines and 13 functions.", known)
    assert kept.dropped_count == 0
    wrong = ground("encoder.py (359 lines, imported by 0; imports nothing): It encodes.", known)
    assert wrong.dropped == {"number": 1}
    assert ground("JSONObject has complexity 22.", known).dropped_count == 0
    assert ground("JSONObject has complexity 45.", known).dropped == {"number": 1}
    meta = ground("This task requires the use of multiple lines to display all functions.", known)
    assert meta.dropped == {"about the prompt": 1}


def test_fragments_calls_and_summaries_of_themselves_are_dropped():
    known = known_json()
    assert ground("Module types.", known).dropped == {"incomplete": 1}
    assert ground('bool("") is not a function that returns True.', known).dropped == {"code": 1}
    assert ground("This is a summary of the module tool.py.", known).dropped == {
        "about the prompt": 1
    }
    assert ground("The loads() function parses a document.", known).dropped_count == 0
