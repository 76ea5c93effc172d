"""A delegate's answer cut off at the output limit reaches its delegator marked, never as whole."""

from __future__ import annotations

from dataclasses import replace

from test_delegation import by_agent, delegate, run_alice, scripted

from clearance import Agent
from clearance._context.answers import TRUNCATED_MARK
from clearance._context.verify import verify_run
from clearance.models import ModelRequest, ModelResponse
from clearance.testing import FunctionModel

CUT = "The first half of the answer, and then"


class CutDelegate(FunctionModel):
    """Bob's (the delegate's) every answer stops at the output limit."""

    async def request(self, request: ModelRequest) -> ModelResponse:
        response = await super().request(request)
        if request.prompt.manifest.agent == "bob":
            return replace(response, finish_reason="length")
        return response


async def test_a_cut_off_delegate_answer_is_marked_for_the_delegator(ledger):
    plans: dict[str, list[object]] = {"alice": [delegate("bob", "Answer."), "done"], "bob": [CUT]}
    model = CutDelegate(scripted(plans)._function)
    alice = Agent(name="alice", instructions="A.", can_delegate_to=("bob",))
    result = await run_alice(ledger, model, alice, Agent(name="bob", instructions="B."))
    shown = by_agent(model, "alice")[-1].prompt.text
    assert f"{CUT}\n\n{TRUNCATED_MARK}" in shown
    assert verify_run(ledger, result.run_id).ok
