"""Every team-file key and every command-line option is named here with the test showing it read.

A key or option nothing reads is accepted and then ignored, silently. This file walks every key
path of the team-file JSON Schema (``clearance schema``, through ``$defs``) and every option of
every ``clearance`` command, and fails when one has no entry in `EFFECT`: the test
(``file::name``) that shows its effect on a run (what the model received, what the ledger
recorded, what was printed), or, for a key refused where it would do nothing, the test of that
refusal beside the test of its effect. A new key or option needs a test before it ships. The
tests named are collected by pytest, so a renamed or deleted one fails here too.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer.main
from typer.testing import CliRunner

from clearance.cli import app

ROOT = Path(__file__).parents[2]

# Files named often below.
EFFECT16 = "tests/cli/test_keys_effect_round16.py"
MORE = "tests/cli/test_keys_effect_more_round16.py"
KEYS = "tests/cli/test_keys_without_effect_cli.py"
MODEL_KEYS = "tests/cli/test_model_keys_without_effect_cli.py"
PARITY = "tests/cli/test_capability_parity_cli.py"
PATHS = "tests/cli/test_capability_paths_cli.py"
TABLE = "tests/cli/test_capability_table.py"
LIMITS = "tests/orchestration/test_limits_in_runs.py"
SUBAGENTS = "tests/orchestration/test_subagents_cli.py"
MCP = "tests/agents/test_mcp.py"

# -- the team file's keys ----------------------------------------------------------------------

_LIMITS = {  # an agent's limits; the coordinator's are the same checks on its calls
    "answer_at_max_steps": "tests/agents/test_tool_loop.py::"
    "test_answer_at_max_steps_makes_the_last_call_without_tools",
    "attempt_timeout_s": "tests/agents/test_caller.py::"
    "test_the_deadline_covers_every_attempt_and_is_not_retried",
    "compact_tool_steps": f"{PATHS}::"
    "test_a_tool_loop_that_would_overflow_is_compacted_when_the_policy_allows",
    "max_children": f"{LIMITS}::test_max_children_refuses_the_spawn_past_the_cap",
    "max_dependency_tokens": "tests/context/test_payload_limits.py::"
    "test_oversized_dependency_fails_the_dependent_and_the_run_goes_on",
    "max_model_calls": f"{PARITY}::test_a_delegate_or_child_makes_at_most_its_max_model_calls",
    "max_output_files": "tests/agents/test_session.py::test_max_output_files_and_size",
    "max_output_size_bytes": f"{LIMITS}::"
    "test_max_output_size_bytes_fails_the_child_that_writes_too_much",
    "max_output_tokens": f"{PARITY}::test_a_chat_summary_asks_for_no_more_than_max_output_tokens",
    "max_prompt_tokens": f"{PARITY}::test_a_chat_turn_keeps_its_prompt_within_max_prompt_tokens",
    "max_steps": f"{LIMITS}::test_max_steps_is_on_record_once_as_a_breach_of_the_task",
    "max_tokens_per_step": f"{LIMITS}::"
    "test_max_tokens_per_step_fails_the_task_and_caps_what_is_asked",
    "max_tool_calls_per_step": f"{LIMITS}::"
    "test_max_tool_calls_per_step_is_on_record_as_a_breach_of_the_task",
    "retries": "tests/orchestration/test_faults.py::"
    "test_thirty_percent_faults_with_retries_give_the_fault_free_results",
    "spawn_timeout_s": f"{SUBAGENTS}::"
    "test_a_team_file_with_isolated_tasks_and_children_runs_inspects_and_verifies",
    "timeout_s": "tests/orchestration/test_orchestrator.py::test_timeout_is_a_limit",
}
_SAMPLING = "tests/orchestration/test_mainjob.py::test_sampling_reaches_the_request"
_COORDINATOR_CALLS = (
    f"{PARITY}::test_the_coordinators_limits_and_sampling_hold_on_each_of_its_calls"
)
_AGENT = {  # keys of an agent; the coordinator's entry has the same keys
    "": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "can_delegate_to": f"{PATHS}::test_a_delegate_never_reads_what_its_delegator_may_not",
    "can_spawn": f"{SUBAGENTS}::"
    "test_a_team_file_with_isolated_tasks_and_children_runs_inspects_and_verifies",
    "instructions": f"{EFFECT16}::"
    "test_inspect_prompt_shows_the_prompt_text_and_no_prompt_leaves_it_out",
    "limits": f"{PARITY}::test_a_delegate_or_child_makes_at_most_its_max_model_calls",
    "memory": f"{PATHS}::test_an_isolated_task_recalls_its_agents_memory_into_its_prompt",
    "memory.recall": "tests/cli/test_memory_cli.py::"
    "test_second_run_recalls_the_first_by_scope_and_verifies",
    "memory.record": "tests/memory/test_memory_settings_effect.py::"
    "test_a_chat_agent_whose_memory_records_nothing_keeps_nothing_it_drops",
    "memory.record_to": "tests/test_docs_commands_round16.py::"
    "test_the_memory_example_records_to_the_group_and_the_private_scopes",
    "model": f"{EFFECT16}::test_the_team_files_name_model_goal_title_and_synthesis_from_are_read",
    "name": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "role": f"{EFFECT16}::test_a_workers_role_is_kept_and_reaches_the_planning_prompt",
    "sampling": _SAMPLING,
    "sampling.repeat_penalty": _SAMPLING,
    "sampling.stop": _SAMPLING,
    "sampling.temperature": _SAMPLING,
    "sampling.top_p": _SAMPLING,
    "store_grants": f"{PATHS}::test_a_delegate_never_reads_what_its_delegator_may_not",
    "store_read_extends_ttl_s": "tests/agents/test_store_memory_tools.py::"
    "test_reads_extend_ttl_through_the_tools_in_a_run",
    "tools": f"{PATHS}::test_a_delegate_is_not_given_a_tool_its_delegator_may_not_call",
    **{f"limits.{k}": v for k, v in _LIMITS.items()},
}
_COORDINATOR_REFUSED = (  # its calls run no tool loop and recall nothing
    f"{MORE}::test_a_loop_or_memory_key_on_a_coordinator_without_a_task_is_refused"
)
_COORDINATOR_NO_LOOP = (
    f"{MORE}::test_a_tool_loop_limit_on_a_coordinator_without_one_is_refused_by_its_own_name"
)
_COORDINATOR_SYNTHESIS = f"{MORE}::test_the_coordinators_limits_hold_on_its_synthesis"
_COORDINATOR = {
    **_AGENT,
    **{
        k: _COORDINATOR_REFUSED
        for k in _AGENT
        if k.split(".")[0] in ("tools", "store_grants", "memory", "can_delegate_to", "can_spawn")
    },
    **{
        f"limits.{k}": _COORDINATOR_NO_LOOP
        for k in (
            "max_steps",
            "compact_tool_steps",
            "answer_at_max_steps",
            "max_children",
            "spawn_timeout_s",
            "max_output_files",
            "max_output_size_bytes",
        )
    },
    **{
        f"limits.{k}": _COORDINATOR_SYNTHESIS
        for k in (
            "retries",
            "timeout_s",
            "attempt_timeout_s",
            "max_tokens_per_step",
            "max_tool_calls_per_step",
            "max_prompt_tokens",
        )
    },
    "store_read_extends_ttl_s": f"{EFFECT16}::test_a_key_nothing_reads_is_refused",
    "": _COORDINATOR_CALLS,
    "instructions": _COORDINATOR_CALLS,
    "limits": _COORDINATOR_CALLS,
    "limits.max_output_tokens": _COORDINATOR_CALLS,
    "limits.max_model_calls": "tests/orchestration/test_hostile_plans_and_resume.py::"
    "test_the_coordinators_max_model_calls_caps_its_planning",
    "limits.max_dependency_tokens": f"{MORE}::"
    "test_the_coordinators_dependency_limit_holds_where_it_answers_a_question",
    "name": _COORDINATOR_CALLS,
    "role": f"{EFFECT16}::test_a_key_nothing_reads_is_refused",  # always refused
    "sampling": _COORDINATOR_CALLS,
    "sampling.stop": _COORDINATOR_CALLS,
    "sampling.temperature": _COORDINATOR_CALLS,
    "sampling.top_p": _COORDINATOR_CALLS,
}
_MCP_SERVER = {
    "command": f"{MCP}::test_run_calls_an_mcp_tool_and_inspect_and_verify_pass",
    "connect_timeout_s": f"{MCP}::test_a_server_that_never_answers_the_handshake_is_a_config_error",
    "env": f"{MCP}::test_a_stdio_server_gets_only_its_declared_environment",
    "headers": "tests/agents/test_mcp_http_hostile_round15.py::"
    "test_a_redirect_to_another_port_is_not_followed_and_carries_no_header",
    "max_result_bytes": f"{MCP}::test_an_oversized_result_is_cut_to_the_cap",
    "max_schema_bytes": f"{MCP}::test_a_bad_or_oversized_tool_schema_is_refused",
    "share": "tests/security/test_mcp_boundaries.py::"
    "test_a_shared_server_is_a_declared_channel_shown_by_verify",
    "timeout_s": f"{MCP}::test_a_hung_tool_call_hits_its_deadline_and_the_server_is_stopped",
    "url": "tests/agents/test_mcp_http_hostile_round15.py::"
    "test_a_run_calling_hostile_http_tools_records_them_and_verifies",
}
_GROUPS = f"{MORE}::test_memory_groups_share_recorded_memory_with_members_only"
_SHARED = (
    "tests/cli/test_chat_cli.py::test_members_of_a_shared_conversation_see_each_others_answers"
)
_REVIEW = f"{EFFECT16}::test_accept_when_decides_which_review_answer_accepts"
_FAN_OUT = (
    f"{SUBAGENTS}::test_a_team_file_with_isolated_tasks_and_children_runs_inspects_and_verifies"
)
_ROUTING = "tests/orchestration/test_routing.py::test_team_file_conditions_on_the_cli_path"
_EMBEDDED = f"{MORE}::test_threads_batch_and_batch_size_are_what_the_embedded_model_is_made_with"
_READ_TOP = f"{EFFECT16}::test_the_team_files_name_model_goal_title_and_synthesis_from_are_read"
_EXECUTOR = f"{MORE}::test_a_team_files_executor_keys_run_the_calls_on_that_cluster"
_BUDGET_CHAT = f"{MODEL_KEYS}::test_chat_keeps_to_the_team_files_token_budget"
_PRICES = f"{MODEL_KEYS}::test_chat_keeps_to_a_cost_budget_in_the_team_files_prices"
_PLAN = "tests/cli/test_plan_cli.py::test_plan_edit_replay"
_APPROVAL = "tests/cli/test_approval_cli.py::test_interactive_approval_runs_the_tool_and_verifies"
_REPLAY = (
    "tests/cli/test_durable_resume_cli.py::"
    "test_a_tool_that_opts_out_of_replay_runs_again_and_that_is_recorded"
)

KEY_EFFECT: dict[str, str] = {
    **{("agents." + k).rstrip("."): v for k, v in _AGENT.items()},
    **{("coordinator." + k).rstrip("."): v for k, v in _COORDINATOR.items()},
    **{f"mcp_servers.*.{k}": v for k, v in _MCP_SERVER.items()},
    "budget": _BUDGET_CHAT,
    "budget.cost_usd": _PRICES,
    "budget.tokens": _BUDGET_CHAT,
    "executor": _EXECUTOR,
    "executor.address": _EXECUTOR,
    "executor.env": _EXECUTOR,
    "executor.kind": _EXECUTOR,
    "executor.workers": _EXECUTOR,
    "goal": _READ_TOP,
    "input": f"{EFFECT16}::test_an_input_folder_a_task_reads_is_kept",
    "input.default": f"{EFFECT16}::test_an_input_folder_a_task_reads_is_kept",
    "input.include": f"{KEYS}::test_a_file_inside_include_is_read",
    "isolation": _FAN_OUT,
    "isolation.file_caps": f"{MORE}::test_file_caps_of_an_isolated_task_hold_through_run",
    "isolation.file_caps.max_file_bytes": "tests/security/test_read_caps.py::"
    "test_a_2gib_file_is_truncated_to_its_cap",
    "isolation.file_caps.max_total_bytes": f"{MORE}::"
    "test_file_caps_of_an_isolated_task_hold_through_run",
    "isolation.file_caps.on_oversize": f"{MORE}::"
    "test_file_caps_of_an_isolated_task_hold_through_run",
    "isolation.max_rounds": "tests/orchestration/test_clarification_questions.py::"
    "test_a_subagent_that_asks_forever_stops_at_max_rounds",
    "max_concurrency": "tests/orchestration/test_orchestrator.py::"
    "test_concurrency_overlaps_and_respects_the_limit",
    "mcp_servers": f"{MCP}::test_run_calls_an_mcp_tool_and_inspect_and_verify_pass",
    "memory": "tests/cli/test_memory_cli.py::"
    "test_second_run_recalls_the_first_by_scope_and_verifies",
    "memory.on_error": "tests/orchestration/test_run_memory.py::"
    "test_on_error_continue_runs_without_memory_and_records_that",
    "memory.url": "tests/cli/test_memory_cli.py::"
    "test_second_run_recalls_the_first_by_scope_and_verifies",
    "memory_groups": _GROUPS,
    "memory_groups.agents": _GROUPS,
    "memory_groups.name": _GROUPS,
    "memory_groups.shared_conversation": _SHARED,
    "memory_groups.shared_conversation.retrieval": "tests/memory/test_memory_prompts.py::"
    "test_shared_conversation_is_opt_in_and_within_the_group",
    "memory_groups.shared_conversation.window": "tests/memory/test_memory_values.py::"
    "test_a_shared_conversation_window_is_a_bounded_count",
    "messages": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "messages.content": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "messages.from": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "messages.to": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "model": _READ_TOP,
    "model_options": "tests/cli/test_model_settings.py::"
    "test_team_file_settings_reach_the_embedded_model",
    "model_options.batch_size": "tests/cli/test_model_settings.py::"
    "test_team_file_settings_reach_the_embedded_model",
    "model_options.by_model": f"{MODEL_KEYS}::test_a_by_model_window_a_provider_takes_is_kept",
    "model_options.context_window": f"{MODEL_KEYS}::"
    "test_the_team_files_window_bounds_a_fake_models_prompt",
    "model_options.threads": "tests/cli/test_model_settings.py::"
    "test_team_file_settings_reach_the_embedded_model",
    "model_options.threads_batch": _EMBEDDED,
    "name": _READ_TOP,
    "plan": _PLAN,
    "plan.run_id": _PLAN,
    "plan.tasks_sha256": "tests/cli/test_plan_forgery.py::"
    "test_the_files_plan_hash_cannot_hide_an_edit",
    "prices": _PRICES,
    "prices.*.input_per_mtok": "tests/orchestration/test_budget.py::"
    "test_a_cost_budget_counts_each_model_at_its_price",
    "prices.*.output_per_mtok": "tests/orchestration/test_budget.py::"
    "test_a_cost_budget_counts_each_model_at_its_price",
    "project": f"{EFFECT16}::test_project_and_constraints_reach_an_isolated_tasks_prompt",
    "report": "tests/orchestration/test_mainjob.py::"
    "test_run_writes_the_report_and_json_with_fake_models",
    "store": f"{TABLE}::test_a_cell_that_works_is_in_the_run",
    "synthesis_from": _READ_TOP,
    "tasks": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "tasks.after_failure": "tests/orchestration/test_mainjob.py::"
    "test_a_failing_step_fails_its_task_and_a_proceeding_dependent_lists_it",
    "tasks.approval": f"{EFFECT16}::test_interactive_decides_a_tasks_approval_at_the_terminal",
    "tasks.assignee": f"{KEYS}::test_a_message_to_a_task_assignee_reaches_its_prompt",
    "tasks.constraints": f"{EFFECT16}::test_project_and_constraints_reach_an_isolated_tasks_prompt",
    "tasks.depends_on": _ROUTING,
    "tasks.depends_on.task": _ROUTING,
    "tasks.depends_on.when": _ROUTING,
    "tasks.description": f"{EFFECT16}::test_an_input_folder_a_task_reads_is_kept",
    "tasks.fan_out": _FAN_OUT,
    "tasks.fan_out.agent": _FAN_OUT,
    "tasks.fan_out.goals": _FAN_OUT,
    "tasks.files": f"{EFFECT16}::test_an_input_folder_a_task_reads_is_kept",
    "tasks.for_each_file": "tests/state/test_teamfile.py::test_example_expands_one_task_per_module",
    "tasks.id": f"{EFFECT16}::test_an_input_folder_a_task_reads_is_kept",
    "tasks.memory_scope": f"{MORE}::"
    "test_memory_scope_decides_which_earlier_results_a_task_is_given",
    "tasks.mode": _FAN_OUT,
    "tasks.output_schema": "tests/orchestration/test_typed_results.py::"
    "test_an_output_schema_from_a_team_file_gives_the_json_value",
    "tasks.review": _REVIEW,
    "tasks.review.accept_when": _REVIEW,
    "tasks.review.by": _REVIEW,
    "tasks.review.rounds": _REVIEW,
    "tasks.run": "tests/orchestration/test_mainjob.py::"
    "test_a_python_step_result_reaches_its_dependent_and_verify_passes",
    "tasks.title": _READ_TOP,
    "tools": _APPROVAL,
    "tools.*.approval": _APPROVAL,
    "tools.*.function": _APPROVAL,
    "tools.*.idempotent": _REPLAY,
    "tools.*.replay": _REPLAY,
    "tools.*.timeout_s": "tests/agents/test_tool_deadlines.py::"
    "test_a_team_file_deadline_reaches_the_tool",
    "workspace": "tests/security/test_workspace_reach_round16.py::"
    "test_a_workspace_root_in_the_project_is_never_listed_nor_given",
}

# -- the command line's options ----------------------------------------------------------------

_RESUME = (
    "tests/cli/test_resume_cli.py::test_sigkill_mid_run_then_resume_gives_the_uninterrupted_results"
)
_RAY_RESUME = (
    "tests/ray/test_ray_executor.py::"
    "test_resume_after_the_orchestrator_is_killed_while_workers_are_busy"
)
_RESUME_BACKENDS = f"{MORE}::test_resume_store_and_memory_are_the_ones_the_rest_of_the_run_uses"
_LISTING = "tests/cli/test_listing_counts_round15.py::"
_STORE_QUERY = f"{_LISTING}test_store_query_says_how_many_more_entries_there_are"
_MEMORY_OPTION = f"{EFFECT16}::test_the_memory_option_is_where_the_run_records_its_agents_memory"
_EMBEDDED_OPTIONS = "tests/cli/test_model_settings.py::test_run_options_override_the_team_file"
_CHAT = "tests/cli/test_keys_without_effect_cli.py::test_chat_uses_the_team_files_model_options"

OPTION_EFFECT: dict[str, str] = {
    "run --goal": f"{EFFECT16}::test_a_workers_role_is_kept_and_reaches_the_planning_prompt",
    "run --model": _COORDINATOR_CALLS,
    "run --context-window": f"{MODEL_KEYS}::test_the_run_option_window_bounds_a_fake_models_prompt",
    "run --threads": _EMBEDDED_OPTIONS,
    "run --threads-batch": _EMBEDDED_OPTIONS,
    "run --batch-size": _EMBEDDED,
    "run --db": f"{EFFECT16}::test_an_input_folder_a_task_reads_is_kept",
    "run --input": f"{EFFECT16}::test_the_input_option_gives_the_folder_a_task_reads",
    "run --max-concurrency": "tests/state/test_graph_shape.py::"
    "test_graph_estimate_and_run_state_width_against_max_concurrency",
    "run --store": "tests/cli/test_store_backends_cli.py::"
    "test_verify_with_the_runs_own_store_still_verifies",
    "run --interactive": _APPROVAL,
    "run --answer-timeout": "tests/cli/test_answer_timeout_cli.py::"
    "test_an_approval_nobody_answers_stays_open_at_the_deadline",
    "run --memory": _MEMORY_OPTION,
    "run --output": "tests/orchestration/test_mainjob.py::"
    "test_run_writes_the_report_and_json_with_fake_models",
    "run --json": "tests/orchestration/test_mainjob.py::"
    "test_run_writes_the_report_and_json_with_fake_models",
    "run --sarif": "tests/reports/test_run_reports.py::"
    "test_the_code_reviews_sarif_validates_against_the_published_schema",
    "run --stream": "tests/cli/test_stream_cli.py::test_run_stream_shows_text_live_and_escaped",
    "run --executor": "tests/security/test_ray_streaming.py::"
    "test_streaming_over_ray_completes_and_shows_the_text",
    "run --ray-address": _RAY_RESUME,
    "run --ray-workers": "tests/security/test_ray_streaming.py::"
    "test_streaming_over_ray_completes_and_shows_the_text",
    "run --ray-env": _RAY_RESUME,
    "plan --goal": _PLAN,
    "plan --output": _PLAN,
    "plan --model": "tests/cli/test_graph_estimate_models_cli.py::"
    "test_plan_says_a_model_given_with_model_was_given_there",
    "plan --db": _PLAN,
    "plan --input": f"{MORE}::test_plan_input_is_the_folder_the_planned_file_reads",
    "resume --model": _RESUME,
    "resume --db": _RESUME,
    "resume --max-concurrency": _RESUME,
    "resume --force": f"{MORE}::test_resume_force_takes_over_a_run_another_host_holds",
    "resume --store": _RESUME_BACKENDS,
    "resume --memory": _RESUME_BACKENDS,
    "resume --team": "tests/cli/test_resume_team_edits_cli.py::"
    "test_the_unedited_team_file_resumes_to_completion",
    "resume --interactive": "tests/cli/test_interactive_resume_cli.py::"
    "test_a_question_left_unanswered_is_asked_at_the_terminal_on_resume",
    "resume --answer-timeout": "tests/cli/test_answer_timeout_cli.py::"
    "test_answer_timeout_is_checked_and_needs_interactive",
    "resume --executor": _RAY_RESUME,
    "resume --ray-address": _RAY_RESUME,
    "resume --ray-workers": "tests/security/test_ray_streaming.py::"
    "test_streaming_over_ray_completes_and_shows_the_text",
    "resume --ray-env": _RAY_RESUME,
    "resume --budget-tokens": "tests/orchestration/test_budget.py::"
    "test_cli_breach_mid_run_then_resume_with_a_larger_budget_completes",
    "resume --budget-cost-usd": f"{MORE}::"
    "test_resume_budget_cost_usd_replaces_the_runs_cost_budget",
    "inspect --task": "tests/cli/test_cli.py::test_inspect_shows_items_origins_tokens_and_prompts",
    "inspect --prompt": f"{EFFECT16}::"
    "test_inspect_prompt_shows_the_prompt_text_and_no_prompt_leaves_it_out",
    "inspect --json": "tests/view/test_inspect_options.py::test_inspect_json_is_the_runs_records",
    "inspect --response-only": "tests/view/test_inspect_options.py::test_inspect_response_only",
    "inspect --pager": f"{EFFECT16}::test_inspect_pages_on_a_terminal_unless_no_pager",
    "inspect --db": "tests/cli/test_cli.py::test_inspect_shows_items_origins_tokens_and_prompts",
    "verify --db": "tests/cli/test_store_backends_cli.py::"
    "test_verify_with_the_runs_own_store_still_verifies",
    "verify --memory": "tests/cli/test_memory_cli.py::"
    "test_verify_says_when_the_memory_is_unreachable",
    "verify --store": "tests/cli/test_store_backends_cli.py::"
    "test_verify_with_the_runs_own_store_still_verifies",
    "verify --head": "tests/security/test_chain_forger.py::"
    "test_a_ledger_rolled_back_verifies_unless_checked_against_its_noted_head",
    "graph --input": "tests/orchestration/test_mainjob.py::"
    "test_graph_estimate_flags_a_task_over_budget",
    "graph --estimate": "tests/cli/test_graph_estimate_models_cli.py::"
    "test_the_estimated_budget_is_the_one_the_run_applies",
    "runs --limit": f"{_LISTING}test_runs_says_how_many_older_runs_are_not_shown",
    "runs --db": f"{_LISTING}test_runs_says_how_many_older_runs_are_not_shown",
    "view --output": "tests/view/test_view.py::test_cli_view_writes_one_self_contained_file",
    "view --db": "tests/view/test_view.py::test_cli_view_writes_one_self_contained_file",
    "serve --port": "tests/view/test_view.py::test_serve_refuses_a_bad_or_busy_port",
    "serve --db": "tests/cli/test_existing_databases_cli.py::"
    "test_a_ledger_that_does_not_exist_is_refused_and_nothing_is_created",
    "chat --agent": _CHAT,
    "chat --db": _CHAT,
    "chat --memory": f"{MORE}::test_chat_memory_is_the_memory_a_session_recalls_from",
    "chat --model": f"{PARITY}::test_a_chat_turn_keeps_its_prompt_within_max_prompt_tokens",
    "chat --strategy": f"{PARITY}::test_a_chat_summary_asks_for_no_more_than_max_output_tokens",
    "chat --context-window": f"{PARITY}::"
    "test_a_chat_turn_keeps_its_prompt_within_max_prompt_tokens",
    "approve --by": "tests/cli/test_approval_cli.py::"
    "test_a_tool_call_waits_for_approval_then_runs_once",
    "approve --db": "tests/cli/test_approval_cli.py::"
    "test_a_tool_call_waits_for_approval_then_runs_once",
    "deny --reason": "tests/cli/test_approval_cli.py::"
    "test_a_denied_tool_call_gives_the_model_the_denial",
    "deny --by": "tests/cli/test_approval_display_cli.py::test_deciding_shows_the_same_short_line",
    "deny --db": "tests/cli/test_approval_cli.py::"
    "test_a_denied_tool_call_gives_the_model_the_denial",
    "init --force": "tests/cli/test_init_cli.py::test_init_never_overwrites_without_force",
    "memory --memory": f"{_LISTING}test_memory_listing_says_how_many_more_records_there_are",
    "memory --db": "tests/cli/test_memory_cli.py::"
    "test_second_run_recalls_the_first_by_scope_and_verifies",
    "memory --limit": f"{_LISTING}test_memory_listing_says_how_many_more_records_there_are",
    "schema --markdown": "tests/cli/test_init_cli.py::"
    "test_schema_prints_the_committed_schema_and_reference",
    "store get --db": "tests/cli/test_store_large_values_cli.py::"
    "test_store_get_prints_a_huge_value_whole_and_escaped_in_bounded_memory",
    "store set --ttl-s": "tests/cli/test_store_backends_cli.py::"
    "test_store_set_keeps_a_ttl_of_a_hundred_years",
    "store set --agent": "tests/agents/test_tool_loop.py::test_store_cli",
    "store set --db": "tests/cli/test_store_backends_cli.py::"
    "test_store_set_keeps_a_ttl_of_a_hundred_years",
    "store query --prefix": _STORE_QUERY,
    "store query --limit": _STORE_QUERY,
    "store query --json": "tests/cli/test_store_large_values_cli.py::"
    "test_store_query_json_prints_a_huge_value_whole_in_bounded_memory",
    "store query --db": _STORE_QUERY,
    "store cleanup --db": "tests/agents/test_tool_loop.py::test_store_cli",
}


def key_paths(
    node: Any, defs: dict[str, Any], prefix: str = "", seen: frozenset = frozenset()
) -> Iterator[str]:
    """Every key path under ``node``: ``a.b`` for nested objects, ``a.*.b`` under a mapping."""
    if not isinstance(node, dict):
        return
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        if name not in seen:  # a recursive definition is walked once
            yield from key_paths(defs[name], defs, prefix, seen | {name})
        return
    for branch in ("anyOf", "oneOf", "allOf"):
        for sub in node.get(branch, []):
            yield from key_paths(sub, defs, prefix, seen)
    for key, sub in node.get("properties", {}).items():
        path = f"{prefix}.{key}" if prefix else key
        yield path
        yield from key_paths(sub, defs, path, seen)
    yield from key_paths(node.get("items"), defs, prefix, seen)
    if isinstance(node.get("additionalProperties"), dict):
        yield from key_paths(node["additionalProperties"], defs, f"{prefix}.*", seen)


def options(command: Any, name: str = "") -> Iterator[str]:
    """``"<command> <option>"`` for every option of every command under ``command``."""
    for sub_name, sub in getattr(command, "commands", {}).items():
        yield from options(sub, f"{name} {sub_name}".strip())
    for param in getattr(command, "params", []):
        if param.param_type_name == "option":
            yield f"{name} {max(param.opts, key=len)}"


def test_every_team_file_key_names_the_test_that_shows_it_read() -> None:
    result = CliRunner().invoke(app, ["schema"])
    assert result.exit_code == 0, result.output
    schema = json.loads(result.output)
    paths = set(key_paths(schema, schema.get("$defs", {})))
    assert len(paths) > 100  # the walk reached the nested definitions
    missing = sorted(paths - KEY_EFFECT.keys())
    assert not missing, f"keys with no test of their effect: {missing}"
    assert not KEY_EFFECT.keys() - paths, "keys the schema no longer has"


def test_every_option_names_the_test_that_shows_it_read() -> None:
    found = set(options(typer.main.get_command(app)))
    assert {"run --goal", "store query --prefix", "inspect --pager"} <= found
    missing = sorted(found - OPTION_EFFECT.keys())
    assert not missing, f"options with no test of their effect: {missing}"
    assert not OPTION_EFFECT.keys() - found, "options the command line no longer has"


def test_every_test_named_is_collected() -> None:
    named = set(KEY_EFFECT.values()) | set(OPTION_EFFECT.values())
    files = sorted({n.split("::")[0] for n in named})
    listing = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         *files],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    collected = {line.split("[")[0] for line in listing.stdout.splitlines() if "::" in line}
    missing = sorted(named - collected)
    assert not missing, f"tests named here that pytest does not collect: {missing}"
