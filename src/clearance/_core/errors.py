"""Errors raised by Clearance.

Every error derives from one root, so ``except ClearanceError`` catches exactly what
Clearance raises on purpose::

    ClearanceError
    ├── ConfigError                 misuse: a bad team file, model id or argument
    ├── GraphError                  misuse: a task graph that cannot run
    │   ├── DuplicateTaskError
    │   ├── UnknownDependencyError
    │   ├── SelfDependencyError
    │   └── CycleError
    ├── PlanError                   the coordinator's plan is not a valid graph (after repair)
    ├── ModelError                  a model provider failed or returned nothing usable
    │                               (``transient`` and ``retry_after_s`` say whether to retry)
    ├── OutputValidationError       a structured result did not validate (after repair)
    ├── SubagentError               an isolated subagent is blocked, or still needs context
    ├── LimitExceeded               a budget was reached (prompt tokens, steps, ...)
    │   └── DependencyPayloadError  one dependency's result is over the per-dependency limit
    ├── BudgetExceeded              the run used its token or cost budget (run stopped, resumable)
    ├── DelegationError             a delegation was refused
    │   ├── DelegationLoopError     the target already appears in the delegation chain
    │   └── MaxDepthError           the chain is at its maximum depth
    ├── ApprovalPending             a call or task waits for a person's approval (run paused)
    ├── ApprovalDenied              a person denied a task that requires approval
    ├── ContextViolation            an item outside the task's clearance reached the builder
    ├── AccessDenied                a scoped view refused an operation
    ├── StoreError                  the run ledger or store could not be read or written
    │   └── LedgerError             the run ledger itself could not be read or written
    └── PathEscapeError             a path resolved outside its allowed root

Errors carry structured fields (ids, limits, the cycle) besides a message that says what
is wrong and what to do about it.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "AccessDenied",
    "ApprovalDenied",
    "ApprovalPending",
    "BudgetExceeded",
    "ClearanceError",
    "ConfigError",
    "ContextViolation",
    "CycleError",
    "SubagentError",
    "DelegationError",
    "DelegationLoopError",
    "DependencyPayloadError",
    "DuplicateTaskError",
    "GraphError",
    "LimitExceeded",
    "MalformedRecord",
    "MaxDepthError",
    "ModelError",
    "OutputValidationError",
    "PathEscapeError",
    "PlanError",
    "SelfDependencyError",
    "StoreError",
    "LedgerError",
    "UnknownDependencyError",
]


class ClearanceError(Exception):
    """Root of every error Clearance raises on purpose."""


class ConfigError(ClearanceError):
    """A team file, model id or argument is invalid.

    Attributes:
        message: What is wrong, without the source and field.
        source: Where the bad value came from (a file path, ``"--model"``...), or ``None``.
        field: Dotted path of the offending field, or ``None``.
    """

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.message = message
        self.source = source
        self.field = field
        where = ": ".join(part for part in (source, field) if part)
        super().__init__(f"{where}: {message}" if where else message)

    def with_source(self, source: str) -> ConfigError:
        """This error said of ``source`` (a file, an option), its field and message kept."""
        return ConfigError(self.message, source=source, field=self.field)


class GraphError(ClearanceError):
    """A task graph cannot run as given."""


class DuplicateTaskError(GraphError):
    """Two or more tasks share an id.

    Attributes:
        task_ids: The duplicated ids, sorted.
    """

    def __init__(self, task_ids: Sequence[str]):
        self.task_ids = tuple(sorted(set(task_ids)))
        super().__init__(f"duplicate task id(s): {', '.join(self.task_ids)}")


class UnknownDependencyError(GraphError):
    """A task depends on an id that is not in the graph.

    Attributes:
        task_id: The task that declares the dependency.
        dependency: The id that does not exist.
    """

    def __init__(self, task_id: str, dependency: str):
        self.task_id = task_id
        self.dependency = dependency
        super().__init__(f"task {task_id!r} depends on unknown task {dependency!r}")


class SelfDependencyError(GraphError):
    """A task lists itself in ``depends_on``.

    Attributes:
        task_id: The offending task.
    """

    def __init__(self, task_id: str):
        self.task_id = task_id
        super().__init__(f"task {task_id!r} depends on itself")


class CycleError(GraphError):
    """The dependencies form a cycle.

    Attributes:
        cycle: The ids along the cycle, first id repeated at the end
            (``("a", "b", "c", "a")``).
    """

    def __init__(self, cycle: Sequence[str]):
        self.cycle = tuple(cycle)
        super().__init__(f"dependency cycle: {' -> '.join(self.cycle)}")


class PlanError(ClearanceError):
    """The coordinator did not return a usable plan, even after one repair attempt.

    Attributes:
        reason: The last validation error.
        response: The coordinator's last raw answer.
    """

    def __init__(self, reason: str, *, response: str = ""):
        self.reason = reason
        self.response = response
        super().__init__(f"the coordinator's plan is invalid: {reason}")


class ModelError(ClearanceError):
    """A model provider failed, or answered with nothing usable.

    Attributes:
        model_id: The ``"provider:name"`` id of the model.
        transient: Whether the same call may succeed if retried: a connection error, a
            timeout, HTTP 429 or a 5xx status. ``False`` for client errors (other 4xx) and
            unusable answers, which a retry would only repeat.
        retry_after_s: Seconds the provider asked to wait before retrying (its
            ``Retry-After``), or ``None`` when it did not say.
        status_code: The HTTP status the provider answered with, or ``None``.
        paid: For an answer that arrived whole but was refused by the provider's checks
            (too long, malformed tool calls): the usage its server reported (a
            `clearance.models.Usage`), which was paid for all the same; the caller charges
            it. ``None`` when there is no such answer or its server reported no usage.
    """

    def __init__(
        self,
        message: str,
        *,
        model_id: str | None = None,
        transient: bool = False,
        retry_after_s: float | None = None,
        status_code: int | None = None,
        paid: object = None,
    ):
        self.model_id = model_id
        self.transient = transient
        self.retry_after_s = retry_after_s
        self.status_code = status_code
        self.paid = paid
        super().__init__(f"{model_id}: {message}" if model_id else message)


class OutputValidationError(ClearanceError):
    """A task's result did not validate against its ``output_schema``, even after one repair.

    Attributes:
        task_id: The task.
        reason: Why the last answer was rejected (not JSON, or the schema error and where).
    """

    def __init__(self, task_id: str, reason: str):
        self.task_id = task_id
        self.reason = reason
        super().__init__(
            f"task {task_id!r}: the result does not match the task's output_schema after one "
            f"repair attempt: {reason}"
        )


class SubagentError(ClearanceError):
    """An isolated task's subagent ended without a result.

    Attributes:
        task_id: The task.
        status: ``"blocked"``, or ``"needs_context"`` when the clarification rounds ran out.
        reason: What the subagent said (why it is blocked, or its last question).
    """

    def __init__(self, task_id: str, status: str, reason: str):
        self.task_id = task_id
        self.status = status
        self.reason = reason
        what = "is blocked" if status == "blocked" else "still needs context"
        super().__init__(f"the subagent of task {task_id!r} {what}: {reason}")


class LimitExceeded(ClearanceError):
    """A configured limit was reached.

    Attributes:
        limit: Name of the limit (``"max_prompt_tokens"``...).
        value: The value reached.
        maximum: The configured maximum.
        subject: What the limit applied to (a task id, an agent), or ``None``.
        hint: What to do about it, appended to the message after ``"; "``, or ``None``.
        recorded: Whether a ``limit_exceeded`` event was already written for this breach (by
            the code that caught it first), so that the task's failure does not write another.
    """

    def __init__(
        self,
        limit: str,
        *,
        value: int | float,
        maximum: int | float,
        subject: str | None,
        hint: str | None = None,
    ):
        self.limit = limit
        self.value = value
        self.maximum = maximum
        self.subject = subject
        self.hint = hint
        self.recorded = False
        who = f"{subject}: " if subject else ""
        tail = f"; {hint}" if hint else ""
        super().__init__(f"{who}{limit} exceeded: {value} > {maximum}{tail}")


class BudgetExceeded(ClearanceError):
    """The run used its budget (`RunBudget`): the next model call was refused, nothing sent.

    The run stops, keeps every finished result, and is recorded ``interrupted``: resume it
    with a larger budget (``clearance resume RUN --budget-tokens N``).

    Not a `LimitExceeded`: an agent's limit fails its task, a run's budget stops the run.

    Attributes:
        limit: ``"tokens"`` or ``"cost_usd"``.
        used: What the run has used (tokens, or US dollars).
        maximum: The budget.
        run_id: The run stopped.
        subject: The call refused (``task:<id>``, ``synthesis``...).
    """

    def __init__(
        self, limit: str, *, used: int | float, maximum: int | float, run_id: str, subject: str
    ):
        self.limit = limit
        self.used = used
        self.maximum = maximum
        self.run_id = run_id
        self.subject = subject
        shown = f"{used:.6f}".rstrip("0").rstrip(".") if isinstance(used, float) else used
        super().__init__(
            f"run {run_id} reached its budget.{limit} ({shown} used of {maximum}) before a "
            f"model call for {subject}; finished results are kept; continue with a larger "
            f"budget: clearance resume {run_id} --budget-{limit.replace('_', '-')} N"
        )


class DependencyPayloadError(LimitExceeded):
    """The result of one dependency is too large to hand to a dependent task.

    Raised instead of truncating the result. ``limit`` is ``"max_dependency_tokens"``,
    ``value`` equals ``tokens`` and ``subject`` is ``"task:<task_id>"``.

    Attributes:
        dependency: The task whose result is too large.
        task_id: The dependent task whose prompt was being built.
        tokens: Tokens of the dependency's result, counted with the dependent's model.
        maximum: The dependent agent's ``max_dependency_tokens``.
    """

    def __init__(self, *, dependency: str, task_id: str, tokens: int, maximum: int):
        self.dependency = dependency
        self.task_id = task_id
        self.tokens = tokens
        super().__init__(
            "max_dependency_tokens", value=tokens, maximum=maximum, subject=f"task:{task_id}"
        )
        # Replace LimitExceeded's generic message with one that names the dependency.
        self.args = (
            f"task {task_id!r}: the result of dependency {dependency!r} is {tokens} tokens, "
            f"over the limit of {maximum} tokens per dependency (max_dependency_tokens); "
            "shorten that result or raise the assignee's limits.max_dependency_tokens",
        )


class DelegationError(ClearanceError):
    """A delegation was refused (an unknown or undeclared target, a loop, or depth).

    Attributes:
        from_agent: The agent that asked to delegate.
        to_agent: The agent it asked for.
        reason: Why it was refused, in one line.
    """

    def __init__(self, from_agent: str, to_agent: str, reason: str):
        self.from_agent = from_agent
        self.to_agent = to_agent
        self.reason = reason
        super().__init__(f"{from_agent!r} may not delegate to {to_agent!r}: {reason}")


class DelegationLoopError(DelegationError):
    """The target already appears in the delegation chain, so delegating would loop.

    Attributes:
        chain: The agents of the chain so far, in order.
    """

    def __init__(self, from_agent: str, to_agent: str, chain: Sequence[str]):
        self.chain = tuple(chain)
        super().__init__(
            from_agent,
            to_agent,
            f"{to_agent!r} is already in the delegation chain {' -> '.join(self.chain)}",
        )


class MaxDepthError(DelegationError):
    """The delegation chain already has its maximum number of steps.

    Attributes:
        max_depth: The maximum number of steps.
    """

    def __init__(self, from_agent: str, to_agent: str, max_depth: int):
        self.max_depth = max_depth
        super().__init__(
            from_agent, to_agent, f"the delegation chain is at its maximum depth of {max_depth}"
        )


class ContextViolation(ClearanceError):
    """An item whose origin is not in the task's clearance was offered to the builder.

    Attributes:
        task_id: The task whose prompt was being built.
        origin: The refused origin (``"task_result:b"``...).
    """

    def __init__(self, task_id: str, origin: str):
        self.task_id = task_id
        self.origin = origin
        super().__init__(f"task {task_id!r} is not cleared to see {origin!r}")


class AccessDenied(ClearanceError):
    """A scoped view refused an operation.

    Attributes:
        agent: The agent that asked.
        resource: What it asked for.
        operation: ``"read"`` or ``"write"``.
    """

    def __init__(self, agent: str, resource: str, operation: str):
        self.agent = agent
        self.resource = resource
        self.operation = operation
        super().__init__(f"agent {agent!r} may not {operation} {resource!r}")


class StoreError(ClearanceError):
    """The run ledger or the context store could not be read or written."""


class LedgerError(StoreError):
    """The run ledger itself could not be read or written.

    Raised inside a run, it stops the run (``interrupted``, resumable) instead of failing
    one task: the record, not the task, is what went wrong.
    """


class MalformedRecord(StoreError):
    """A stored row holds what its column never holds (text that is not JSON): edited by hand.

    ``clearance verify`` reports it as a finding (exit 1); other commands, in one line.
    """


class PathEscapeError(ClearanceError):
    """A path resolves outside the root it is confined to.

    Attributes:
        path: The path as given.
        root: The root it must stay inside.
        reason: How it escapes (``"it has a '..' component"``...), or ``None``.
    """

    def __init__(self, path: str, root: str, *, reason: str | None = None):
        self.path = path
        self.root = root
        self.reason = reason
        because = f": {reason}" if reason else ""
        super().__init__(f"path {path!r} escapes {root!r}{because}")


class ApprovalPending(ClearanceError):
    """A tool call or a task requires a person's approval that is not recorded yet.

    The task stops there (recorded ``interrupted``); the run pauses once nothing else can
    run, and continues with ``clearance resume`` after ``clearance approve`` / ``deny``.

    Attributes:
        call_ids: The approval requests' ids (``apr_...``), as recorded in the ledger.
    """

    def __init__(self, call_ids: Sequence[str]):
        self.call_ids = tuple(call_ids)
        super().__init__(f"awaiting approval: {', '.join(self.call_ids)}")


class ApprovalDenied(ClearanceError):
    """A person denied a task that requires approval; the task fails.

    Attributes:
        task_id: The task.
        call_id: The approval request's id.
        by: Who denied it.
        reason: Why, as they gave it (``""`` when they gave none).
    """

    def __init__(self, task_id: str, call_id: str, *, by: str, reason: str = ""):
        self.task_id, self.call_id, self.by, self.reason = task_id, call_id, by, reason
        why = f": {reason}" if reason else ""
        super().__init__(f"task {task_id!r} was denied by {by} (approval {call_id}){why}")
