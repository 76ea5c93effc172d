"""`FakeModel`: a deterministic test double reachable by model id (``fake:<name>``).

It lets a real ``clearance run`` subprocess (or any code that only knows model ids) run
without a model: ``clearance run team.yaml --model fake:echo``. Never use it for real work:
its answers are digests of the prompt, not completions.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import os

from clearance._core.errors import ConfigError
from clearance._core.vocabulary import OriginKind
from clearance._orchestration.planner import PLAN_SCHEMA
from clearance.models._base import ModelRequest, ModelResponse, Usage, estimate_tokens
from clearance.testing._instance import schema_instance
from clearance.testing._models import stream_text

__all__ = ["LATENCY_ENV", "FakeModel"]

LATENCY_ENV = "CLEARANCE_FAKE_LATENCY_S"
"""Environment variable giving `FakeModel`'s default latency in seconds (a float)."""

MAX_LATENCY_S = 86_400.0
"""Longest latency a `FakeModel` takes, in seconds (a day): more is a mistake, not a test."""


def _latency_problem(latency: float) -> str | None:
    """Why ``latency`` is not a latency in seconds, or ``None``."""
    if not latency >= 0:
        return "must be 0 or more"
    if not math.isfinite(latency) or latency > MAX_LATENCY_S:
        return f"must be at most {MAX_LATENCY_S:g} seconds"
    return None


def _latency_from_env() -> float:
    value = os.environ.get(LATENCY_ENV, "").strip()
    if not value:
        return 0.0
    try:
        latency = float(value)
    except ValueError:
        raise ConfigError(
            f"must be a number of seconds, got {value!r}", field=LATENCY_ENV
        ) from None
    if (problem := _latency_problem(latency)) is not None:
        raise ConfigError(f"{problem}, got {value!r}", field=LATENCY_ENV)
    return latency


class FakeModel:
    """A deterministic fake chat model (a test double), created by ``get_model("fake:<name>")``.

    The answer depends only on the model's name and the prompt's text: the same prompt gets
    the same answer in every run and every process, so two runs of one graph give identical
    results. A task prompt is answered with ``"<name> result for <task title>: <digest>"``
    where the digest is the first 16 hex digits of SHA-256 of the whole prompt text (so a
    result also changes when the results it was given change). A request with a JSON schema
    (a task's ``output_schema``) is answered with a JSON instance of that schema built
    deterministically from it (required properties, the first ``const``/``enum`` value,
    ``minItems`` items, strings from the digest cut to ``maxLength``, numbers within their
    bounds), so a team file with structured hand-offs runs on the fake. The coordinator's plan
    is answered with the digest as a JSON string, which is not a plan: plan a team with a
    `ScriptedModel` instead.

    Every request is recorded in `requests`.

    Args:
        name: Any name; the model id is ``"fake:<name>"``.
        latency_s: Seconds each call waits before answering (an ``asyncio.sleep``); ``None``
            means the ``CLEARANCE_FAKE_LATENCY_S`` environment variable, else 0.
        context_window: Tokens it claims to attend to; ``None`` means unknown.

    Raises:
        ConfigError: The name is empty, or the latency is negative, not a number, or over
            `MAX_LATENCY_S`.
    """

    def __init__(
        self, name: str, *, latency_s: float | None = None, context_window: int | None = None
    ):
        if not name:
            raise ConfigError("the fake model's name is empty", field="model")
        latency = _latency_from_env() if latency_s is None else latency_s
        if (problem := _latency_problem(latency)) is not None:
            raise ConfigError(f"{problem}, got {latency}", field="latency_s")
        self.name = name
        self.model_id = f"fake:{name}"
        self.context_window = context_window
        self.latency_s = latency
        self.requests: list[ModelRequest] = []

    def __repr__(self) -> str:
        return f"FakeModel({self.model_id!r}, latency_s={self.latency_s})"

    def answer(self, request: ModelRequest) -> str:
        """The answer `request` gets: a pure function of the name and the prompt's text."""
        text = request.prompt.text
        digest = hashlib.sha256(f"{self.name}\0{text}".encode()).hexdigest()[:16]
        if request.json_schema is not None:
            if request.json_schema == PLAN_SCHEMA:
                return json.dumps(digest)
            return json.dumps(schema_instance(request.json_schema, digest))
        heading = next(
            (
                item.title
                for item in request.prompt.manifest.items[1:]
                if item.kind != OriginKind.TOOL_SPEC
            ),
            "",
        )
        return f"{self.name} result for {heading or 'the prompt'}: {digest}"

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Record the request, wait ``latency_s`` seconds, and return `answer`."""
        self.requests.append(request)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        text = self.answer(request)
        stream_text(request, text)
        return ModelResponse(
            text=text,
            usage=Usage(
                requests=1,
                prompt_tokens=sum(estimate_tokens(m.content) for m in request.prompt.messages),
                completion_tokens=estimate_tokens(text),
            ),
            model_id=self.model_id,
            finish_reason="stop",
        )

    def count_tokens(self, text: str) -> int:
        """Estimated tokens (one per 4 UTF-8 bytes)."""
        return estimate_tokens(text)
