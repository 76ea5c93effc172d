"""The canary team of `test_canary_channels_round17.py`: its team file and its scripted model.

Every answer the scripted server gives holds a canary of its own (`Canaries`), so the
request bodies the server keeps tell which answer reached which prompt. Each request is
attributed to the prompt it is (`viewer`): the task whose ``TAG=`` its task text holds, or a
delegate, child, reviewer, clarification or synthesis.
"""

from __future__ import annotations

import json
import re
import secrets
from typing import Any

TEAM = """\
name: canary
goal: Put the findings together.
store: sqlite:///{tmp}/store.db
memory: sqlite:///{tmp}/memory.db
input: {{default: {tmp}/in}}
max_concurrency: 1
synthesis_from: [scout_t, diary_t, reader_t, archivist_t, analyst_t, iso_t, parent_t, boss_t,
  after_t, rev_t, loop_t, fe_alpha, fe_beta, final_t]
coordinator: {{name: lead, instructions: You are the lead.}}
memory_groups:
  - {{name: desk, agents: [scout, archivist]}}
agents:
  - name: scout
    instructions: You are the scout.
    tools: [store_set, write_output]
    store_grants: {{"shared/*": read_write}}
    memory: {{recall: 3, record: result, record_to: desk}}
  - name: reader
    instructions: You are the reader.
    tools: [store_get, store_query]
    store_grants: {{"shared/*": read}}
  - name: outsider
    instructions: You are the outsider.
    tools: [store_get, store_query, store_search, store_set, read_output]
    store_grants: {{"other/*": read, "shared/inbox": write}}
    memory: {{recall: 3, record: result}}
  - name: archivist
    instructions: You are the archivist.
    memory: {{recall: 3, record: none}}
  - name: diarist
    instructions: You are the diarist.
    memory: {{recall: 3, record: task_and_result}}
  - {{name: analyst, instructions: You are the analyst.}}
  - {{name: iso, instructions: You are the iso.}}
  - {{name: parent, instructions: You are the parent., can_spawn: [kid]}}
  - {{name: kid, instructions: You are the kid.}}
  - {{name: boss, instructions: You are the boss., can_delegate_to: [helper]}}
  - {{name: helper, instructions: You are the helper.}}
  - name: flaky
    instructions: You are the flaky.
  - {{name: writer, instructions: You are the writer.}}
  - {{name: critic, instructions: You are the critic.}}
  - name: looper
    instructions: You are the looper.
    tools: [write_output, read_output]
    limits: {{compact_tool_steps: 1, max_steps: 8}}
  - {{name: filer, instructions: You are the filer.}}
  - {{name: closer, instructions: You are the closer.}}
tasks:
  - {{id: scout_t, title: Scout notes, description: TAG=scout_t; scout., assignee: scout}}
  - {{id: reader_t, title: Reader, description: TAG=reader_t; read., assignee: reader}}
  - {{id: outsider_t, title: Outsider, description: TAG=outsider_t; look., assignee: outsider}}
  - {{id: diary_t, title: Diary, description: TAG=diary_t; note., assignee: diarist}}
  - id: archivist_t
    title: Archive
    description: TAG=archivist_t; what the scout found.
    assignee: archivist
  - id: analyst_t
    title: Analysis
    description: TAG=analyst_t; analyse.
    assignee: analyst
    depends_on: [scout_t]
  - id: iso_t
    title: Isolated
    description: TAG=iso_t; work alone.
    assignee: iso
    mode: isolated
    depends_on: [analyst_t]
  - {{id: parent_t, title: Parent, description: TAG=parent_t; spawn., assignee: parent}}
  - {{id: boss_t, title: Boss, description: TAG=boss_t; delegate., assignee: boss}}
  - id: flaky_t
    title: Flaky
    description: TAG=flaky_t; answer in JSON.
    assignee: flaky
    output_schema: {{type: object, required: [answer], properties: {{answer: {{type: string}}}}}}
  - id: after_t
    title: After
    description: TAG=after_t; go on.
    assignee: analyst
    depends_on: [flaky_t]
    after_failure: proceed
  - id: rev_t
    title: Reviewed
    description: TAG=rev_t; write.
    assignee: writer
    review: {{by: [critic], rounds: 2}}
  - {{id: loop_t, title: Loop, description: TAG=loop_t; loop., assignee: looper}}
  - id: "fe_{{slug}}"
    title: "File {{name}}"
    description: "TAG=fe_{{slug}}; read {{name}}."
    assignee: filer
    files: ["{{path}}"]
    for_each_file: "*.txt"
  - id: final_t
    title: Final
    description: TAG=final_t; close.
    assignee: closer
    depends_on: [scout_t, rev_t]
"""

FILES = ("alpha", "beta")
EMITTERS = (
    "scout_t", "diary_t", "reader_t", "outsider_t", "archivist_t", "analyst_t", "iso_t", "parent_t",
    "boss_t", "flaky_t", "after_t", "rev_t", "loop_t", "final_t",
    *(f"fe_{name}" for name in FILES),
    "scout-store", "scout-file", "kid", "helper", "clar", "flaky-bad", "rev-draft", "critic",
    "loop-file", "synthesis", "file-alpha", "file-beta", "outsider-key",
)  # fmt: skip
TAG = re.compile(r"TAG=([\w.-]+);")
RESULTS = "## Results of your tool calls"


class Canaries:
    """One canary per emitter, new for every harness; `found` lists those a text holds."""

    def __init__(self) -> None:
        salt = secrets.token_hex(3)
        self.of = {key: f"CANARY-{key}-{salt}{n:03d}" for n, key in enumerate(EMITTERS)}
        self._pattern = re.compile(rf"CANARY-[\w.-]+?-{salt}\d{{3}}")
        self._by_value = {value: key for key, value in self.of.items()}

    def found(self, text: str) -> set[str]:
        return {self._by_value.get(m, m) for m in self._pattern.findall(text)}


def scout_answer(c: Canaries) -> str:
    """A long answer with what a careless renderer would break: fences, headings, labels."""
    lines = [f"Scout found {c.of['scout_t']}.", "~~~~ Outsider (by outsider)", "## Task",
             "```", "    indented", "```", "tail  "]  # fmt: skip
    lines += [f"line {n}: " + "word " * 12 for n in range(40)]
    return "\n".join(lines) + "\n\n"


class Script:
    """The scripted model: ``reply(messages)`` for `openai_server`; ``phase`` 1 fails flaky."""

    def __init__(self, c: Canaries) -> None:
        self.c = c
        self.phase = 1
        self.loop_steps = 0

    def __call__(self, messages: list[dict[str, Any]]) -> Any:
        c = self.c.of
        system = messages[0]["content"]
        user = "\n".join(m.get("content") or "" for m in messages[1:])
        agent = re.match(r"You are the (\w+)\.", system)
        name = agent.group(1) if agent else ""
        tag = TAG.search(user)
        own = tag.group(1) if tag else ""
        called = RESULTS in user
        if name == "scout":
            if not called:
                return [("store_set", {"namespace": "shared/notes", "key": "n1",
                                       "value": f"note {c['scout-store']}"}),
                        ("write_output", {"name": f"{c['scout-file']}.txt",
                                          "content": "x"})]  # fmt: skip
            return scout_answer(self.c)
        if name == "reader":
            if not called:
                return [("store_get", {"namespace": "shared/notes", "key": "n1"}),
                        ("store_query", {"namespace": "shared/notes"})]  # fmt: skip
            return f"reader {c['reader_t']}"
        if name == "outsider":
            if not called:
                return [("store_get", {"namespace": "shared/notes", "key": "n1"}),
                        ("store_query", {"namespace": "shared/notes"}),
                        ("store_get", {"namespace": "other/x", "key": c["outsider-key"]}),
                        ("store_search", {"text": "CANARY"}),
                        ("store_search", {"text": "n1"}),
                        ("store_set", {"namespace": "shared/notes", "key": "n1", "value": "x"}),
                        ("read_output", {"name": "nothing.txt"})]  # fmt: skip
            return f"outsider {c['outsider_t']}"
        if name == "iso":
            if "QQQ" not in user and "## Clarifications" not in user and c["clar"] not in user:
                return "Need more.\nSTATUS: NEEDS_CONTEXT\nQUESTION: QQQ which scope?"
            return f"iso {c['iso_t']}\nSTATUS: DONE"
        if name == "lead":
            if "QQQ" in user:
                return f"clarified {c['clar']}"
            return f"synthesis {c['synthesis']}"
        if name == "parent":
            if not called:
                return [("spawn", {"agent": "kid", "goal": "TAG=kid; find it."})]
            return f"parent {c['parent_t']}"
        if name == "kid":
            return f"kid {c['kid']}"
        if name == "boss":
            if not called:
                return [("delegate", {"agent": "helper", "task": "TAG=helper; help."})]
            return f"boss {c['boss_t']}"
        if name == "helper":
            return f"helper {c['helper']}"
        if name == "flaky":
            if self.phase == 1:
                return json.dumps({"answer": [c["flaky-bad"]]})
            return json.dumps({"answer": f"flaky {c['flaky_t']}"})
        if name == "writer":
            if c["critic"] in user:
                return f"final draft {c['rev_t']}"
            return f"first draft {c['rev-draft']}"
        if name == "critic":
            if c["rev-draft"] in user:
                return json.dumps({"verdict": "revise", "findings": f"fix {c['critic']}"})
            return json.dumps({"verdict": "accept", "findings": "fine"})
        if name == "looper":
            self.loop_steps += 1
            steps = self.loop_steps
            if steps == 1:
                return [("write_output", {"name": "log.txt",
                                          "content": f"log {c['loop-file']}\n" * 3})]  # fmt: skip
            if steps < 5:
                return [("read_output", {"name": "log.txt", "start_line": steps - 1})]
            return f"loop {c['loop_t']}"
        if name == "filer":
            return f"filer {c.get(own, own)}"
        return f"{name} {c.get(own, 'UNKNOWN-' + own)}"


def viewer(messages: list[dict[str, Any]]) -> str:
    """Which prompt a request is: a task id, a delegate, child or reviewer, or the lead's."""
    system = messages[0]["content"]
    user = "\n".join(m.get("content") or "" for m in messages[1:])
    agent = re.match(r"You are the (\w+)\.", system)
    name = agent.group(1) if agent else system[:40]
    if name == "lead":
        return "clarification" if "QQQ" in user else "synthesis"
    if name == "critic":
        return "critic"
    own = TAG.search(user)
    return own.group(1) if own else f"?{name}"
