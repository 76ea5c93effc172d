"""Test doubles for unit tests of code built on Clearance.

`ScriptedModel` answers from a queue; `FunctionModel` answers with a function of the
request. Both record every `ModelRequest` they receive, so tests assert on what a model
was actually sent. `CanaryModel` marks every completion with a unique canary, and
`assert_saw` / `assert_never_saw` check in one line whether a task's prompts held a text.
`FakeModel` answers deterministically and is reachable by model id (``fake:<name>``), so a
``clearance run`` subprocess can use it. `FaultInjectingModel` wraps any model and fails a
seeded fraction of its calls with transient faults.
"""

from clearance.testing._canary import CanaryModel, assert_never_saw, assert_saw
from clearance.testing._fake import LATENCY_ENV, FakeModel
from clearance.testing._faults import FAULT_KINDS, FaultInjectingModel, FaultKind
from clearance.testing._models import FunctionModel, ScriptedModel

__all__ = [
    "CanaryModel",
    "FAULT_KINDS",
    "FakeModel",
    "FaultInjectingModel",
    "FaultKind",
    "FunctionModel",
    "LATENCY_ENV",
    "ScriptedModel",
    "assert_never_saw",
    "assert_saw",
]
