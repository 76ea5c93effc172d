"""A worker's error outcome carries a `ModelError`'s details; they are checked like the rest.

Before, an error outcome was ``("error", kind, message, transient)``: the ``retry_after_s``,
``status_code`` and ``paid`` usage of a provider's `ModelError` were dropped on the worker, so
a call answered under Ray was retried, and charged, unlike the same call made locally. Now
they cross as a fifth element, and a worker cannot make the orchestrator wait for a day and
more, or charge something that is not a `Usage`, with it.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from clearance import ModelError
from clearance._orchestration.ray_worker import checked_outcome, error_outcome
from clearance.models._base import Usage

PAID = Usage(requests=1, prompt_tokens=3, completion_tokens=4)


def test_a_model_errors_details_cross_and_read_as_in_this_process() -> None:
    exc = ModelError("HTTP 429", model_id="openai:x", transient=True, retry_after_s=2.5,
                     status_code=429, paid=PAID)  # fmt: skip
    outcome = error_outcome(exc)
    with pytest.raises(ModelError) as info:
        checked_outcome(outcome, "openai:x")
    got = info.value
    assert str(got) == str(exc) == "openai:x: HTTP 429"
    assert (got.transient, got.retry_after_s, got.status_code, got.paid) == (True, 2.5, 429, PAID)


@pytest.mark.parametrize(
    ("exc", "transient", "text"),
    [
        (ConnectionError("refused"), True, "fake:m: ConnectionError: refused"),
        (SystemExit(3), False, "fake:m: SystemExit: 3"),
        (ValueError("no"), False, "fake:m: ValueError: no"),
    ],
)
def test_other_errors_read_as_model_caller_words_them(
    exc: BaseException, transient: bool, text: str
) -> None:
    with pytest.raises(ModelError) as info:
        checked_outcome(error_outcome(exc), "fake:m")
    assert (str(info.value), info.value.transient) == (text, transient)


@pytest.mark.parametrize(
    "details",
    [
        None,
        [],
        {"retry_after_s": math.nan},
        {"retry_after_s": math.inf},
        {"retry_after_s": -1},
        {"retry_after_s": 86_401},
        {"retry_after_s": True},
        {"retry_after_s": "5"},
        {"status_code": "429"},
        {"status_code": 99},
        {"status_code": 600},
        {"status_code": True},
        {"paid": {"requests": 1}},
        {"paid": 5},
        {"other": 1},
        {"model_id": ""},
        {"model_id": "x" * 201},
        {"model_id": "fake:m\nforged line"},
        {"model_id": 5},
    ],
)
def test_malformed_details_make_a_malformed_outcome(details: Any) -> None:
    with pytest.raises(ModelError, match="malformed outcome") as info:
        checked_outcome(("error", "ModelError", "boom", True, details), "fake:m")
    assert info.value.retry_after_s is None and info.value.paid is None


@pytest.mark.parametrize(("named", "reads"), [(None, "boom"), ("custom:own", "custom:own: boom")])
def test_a_model_errors_own_model_id_crosses_as_it_named_it(named: Any, reads: str) -> None:
    outcome = error_outcome(ModelError("boom", model_id=named))
    with pytest.raises(ModelError) as info:
        checked_outcome(outcome, "fake:pool")
    assert str(info.value) == reads  # as ModelCaller would read it in this process
    assert info.value.model_id == named
