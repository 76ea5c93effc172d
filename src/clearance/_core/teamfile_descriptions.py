"""What each key of a team file means, for the parts of `RunSpec` whose docstrings do not say.

`RunSpec`, `ExecutorSpec` and `McpServerSpec` describe their keys in their docstrings'
``Attributes:`` sections, and ``limits:`` is described by `AgentLimits`'s; the other parts in
`clearance._core.teamfile_models` are described here, by model and key.
`clearance._core.team_reference` puts both into the team file's JSON Schema and reference,
and refuses a key described nowhere.
"""

from __future__ import annotations

__all__ = ["DESCRIPTIONS"]

DESCRIPTIONS: dict[str, dict[str, str]] = {
    "AgentMemorySpec": {
        "recall": "Memories recalled into the prompt before a task (0: none).",
        "record": "What is recorded after a task: nothing, its result, or task and result.",
        "record_to": "The memory group recorded to (None: the agent's own memory).",
    },
    "SamplingSpec": {
        "temperature": "Sampling temperature, 0 to 2 (None: the model's default).",
        "top_p": "Nucleus sampling mass, above 0 to 1 (None: the model's default).",
        "repeat_penalty": "Penalty on repeated tokens, 1 to 2 (llama-cpp models and "
        "OpenAI-compatible servers; refused for anthropic: models, which have none).",
        "stop": "Strings that end an answer (at most 8).",
    },
    "ModelOptionsSpec": {
        "context_window": "Tokens the models attend to: bounds each prompt of openai:, "
        "anthropic: and fake: models; the context llama-cpp: models load with (refused for "
        "a model of another provider: give it in by_model).",
        "threads": "Generation threads of llama-cpp: models (1 to 256).",
        "threads_batch": "Prompt evaluation (prefill) threads of llama-cpp: models (1 to 256).",
        "batch_size": "Prompt tokens per step of llama-cpp: models (1 to 8192).",
        "by_model": "Settings of one model id (context_window, n_ctx, n_threads, "
        "n_threads_batch, n_batch), over the team-wide ones.",
    },
    "AgentSpec": {
        "name": "The agent's name, unique in the team.",
        "instructions": "The agent's system instructions.",
        "role": (
            "A short role shown to the coordinator when it plans (a worker's; not the "
            "coordinator's own)."
        ),
        "model": "The agent's model id, `provider:name` (None: the team's `model`).",
        "limits": "Token, time, step and retry limits of the agent.",
        "tools": "Tools the agent may call: the built-ins (`store_get`, `store_set`, "
        "`store_query`, `store_set_with_extension`, `store_touch`, `store_get_structured`, "
        "`store_search`, each within `store_grants`; `write_output` and `read_output`, on the "
        "agent's own outputs folder), names of the team's "
        "`tools:`, or `mcp:<server>/<tool>`. As a delegate or child, only the team and MCP "
        "tools its caller may call too are offered.",
        "can_delegate_to": "Agents this agent may delegate a task to (a delegate tool); a "
        "delegate acts with at most this agent's grants and tools.",
        "can_spawn": "Agents this agent may spawn as children (a spawn tool); a child acts "
        "with at most this agent's grants and tools.",
        "store_grants": "Store namespaces the agent may read, write or both (a trailing `*` "
        "matches a prefix: `notes/*`); any other is denied. As a delegate or child, at most "
        "its caller's.",
        "memory": "Long-term memory: recall before a task, record after (None: none).",
        "store_read_extends_ttl_s": "A store entry the agent reads expires at least this many "
        "seconds later "
        "(None: reads leave expiry alone).",
        "sampling": "How the agent's model decodes.",
    },
    "FanOutSpec": {
        "agent": "The agent each child runs as.",
        "goals": "One goal per child, run before the task's agent answers (at most 4,000 "
        "characters each: it heads the child's result in the task's prompt).",
    },
    "DependencySpec": {
        "task": "The id of the task depended on.",
        "when": "Condition on its structured result: JSON pointer to required value; "
        "unmet, the dependent task is skipped.",
    },
    "ReviewSpec": {
        "by": "Agents that review the task's result (1 to 8).",
        "rounds": "Most review rounds before the task fails.",
        "accept_when": "Condition on a review's JSON (pointer to value) that accepts it.",
    },
    "TaskSpec": {
        "id": "The task's id, unique in the run (in a for_each_file task, `{slug}`: the "
        "file's path without its suffix, `/` as `.`, other characters an id may not hold "
        "as `-`). Two ids that differ only by `:` and `_` are refused (their children's ids "
        "would be alike), and so is an id over 122 characters on a task that may have "
        "children (fewer with a max_children over 9).",
        "title": "A short title, one line, unique among the tasks (ignoring case, Unicode "
        "normalization and invisible characters such as a zero-width space): dependents "
        "and the synthesis read each result labelled by it.",
        "description": "What the task asks: its prompt's text.",
        "assignee": "The agent that does the task (or give run:).",
        "depends_on": "Tasks whose results this task sees: ids, or {task, when} entries.",
        "memory_scope": "Which earlier results the task sees: its dependencies', "
        "transitively, or all.",
        "files": "Files of the input folder put into the prompt (each checked when the file "
        "is read: it must exist, be a regular file and stay inside the folder).",
        "output_schema": "JSON Schema the answer must match (one repair attempt).",
        "for_each_file": "A glob in the input folder: one copy of the task per match (at most "
        "10,000 matches, in a folder of at most 200,000 files); `{path}`, `{name}`, `{stem}` "
        "and `{slug}` in its strings are filled in from the file. A team file holds at most 64 "
        "such tasks; once expanded, its tasks are at most 100,000 tasks with at most "
        "1,000,000 dependencies, and filling in adds at most 16 MiB of text.",
        "mode": "standard, or isolated (its agent works in a sandboxed project copy).",
        "constraints": "Lines added to the task's prompt as constraints.",
        "fan_out": "Children spawned before the task's agent answers.",
        "run": "A step run instead of an agent: `step:<name>` (built in: `module_facts`, "
        "`package_facts`, `review_brief`) or `python:<module>:<function>`.",
        "after_failure": "What the task does when a dependency failed: skip, or proceed.",
        "approval": "required: the task waits for `clearance approve` before it starts.",
        "review": "A bounded review loop on the task's result.",
    },
    "MessageSpec": {
        "from": "The sending agent.",
        "to": "The receiving agent (or `*`: all): the assignee of a standard task, whose "
        "prompts are the only ones that hold messages.",
        "content": "The message's text.",
    },
    "SharedConversationSpec": {
        "window": "Recent turns of the group's conversation put into a prompt.",
        "retrieval": "Which turns: the most recent, or the most relevant.",
    },
    "MemoryGroupSpec": {
        "name": "The group's name (record_to names it).",
        "agents": (
            "The agents that share the memory (at least 2); refused when none has `memory:` "
            "and the group declares no shared_conversation."
        ),
        "shared_conversation": "A conversation the group shares (opt-in).",
    },
    "InputSpec": {
        "default": (
            "The input folder, or `python:<package>` (None: none; `--input` gives one); "
            "refused when no task reads it."
        ),
        "include": "Globs of the files tasks may read from it (their files:, for_each_file "
        "matches, and an isolated task's FILE: requests when project: names no other folder); "
        "a file outside them is refused.",
    },
    "FileCapsSpec": {
        "max_file_bytes": "Most bytes of one file of an isolated task.",
        "max_total_bytes": "Most bytes of all files of an isolated task.",
        "on_oversize": "A file over the caps: an error, or truncated.",
    },
    "IsolationSpec": {
        "max_rounds": "Clarification rounds of an isolated task (0 to 10).",
        "file_caps": "Size caps on the files of one isolated task.",
    },
    "MemorySpec": {
        "url": "The memory's database URL (None: `memory.db` next to the ledger, "
        "`.clearance/memory.db` by default).",
        "on_error": "When the memory fails: fail the task, or continue without it.",
    },
    "ToolEntrySpec": {
        "function": "The tool, `module:function` (None: given in code).",
        "approval": "required: each call waits for `clearance approve`.",
        "idempotent": "A resume may run again a call the stopped run may have run.",
        "replay": "On resume, replay the recorded result (false: run the call again).",
        "timeout_s": "Seconds one call may take; past it the model is told so (the run goes on).",
    },
    "PriceSpec": {
        "input_per_mtok": "US dollars per million prompt tokens.",
        "output_per_mtok": "US dollars per million completion tokens.",
    },
    "BudgetSpec": {
        "tokens": "Most tokens (prompt plus completion) of the run.",
        "cost_usd": "Most US dollars of the run (needs prices:).",
    },
    "PlanRefSpec": {
        "run_id": "The run that planned the tasks.",
        "tasks_sha256": "SHA-256 of the planned tasks; edited tasks no longer match.",
    },
}
"""Description of each key, by model name and key (its alias where it has one)."""
