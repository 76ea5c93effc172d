"""`FaultInjectingModel`: wraps any `ChatModel` and makes a seeded fraction of its calls fail."""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Callable, Sequence
from enum import StrEnum

from clearance._core.errors import ConfigError, ModelError
from clearance.models._base import ChatModel, ModelRequest, ModelResponse, framing_tokens

__all__ = ["FAULT_KINDS", "FaultInjectingModel", "FaultKind"]


class FaultKind(StrEnum):
    """One kind of injected fault.

    - ``"connection"``: a transient `ModelError` as for a refused or dropped connection.
    - ``"timeout"``: a transient `ModelError` as for a provider-side request timeout.
    - ``"rate_limit"``: a transient `ModelError` with ``status_code`` 429 and ``retry_after_s``.
    - ``"server_error"``: a transient `ModelError` with ``status_code`` 503.
    - ``"hang"``: the call waits ``hang_s`` seconds before answering, so the agent's
      ``limits.timeout_s`` (when shorter) times it out.
    """

    CONNECTION = "connection"
    TIMEOUT = "timeout"
    RATE_LIMIT = "rate_limit"
    SERVER_ERROR = "server_error"
    HANG = "hang"


FAULT_KINDS: tuple[FaultKind, ...] = tuple(FaultKind)
"""Every kind of fault, the default mix."""


class FaultInjectingModel:
    """A `ChatModel` that fails a seeded fraction of calls with transient faults (a test double).

    For each call (that ``when`` selects), a seeded random draw decides whether it fails and,
    if so, picks one of ``kinds`` uniformly. Calls that do not fail go to the wrapped model
    unchanged, so a run that retries through the faults gets exactly the wrapped model's
    answers. Which calls fail depends on the seed and on the order of the calls.

    Args:
        model: The model to wrap.
        rate: Fraction of calls that fail, in ``[0, 1]`` (1: every call).
        kinds: Kinds of fault to inject (see `FaultKind`); all of them by default.
        seed: Seed of the random draws.
        when: Only calls for which ``when(request)`` is true may fail; ``None`` means all.
        hang_s: Seconds a ``"hang"`` fault waits before the call goes through.
        retry_after_s: The ``retry_after_s`` of ``"rate_limit"`` faults (seconds), or
            ``None`` for none.

    Attributes:
        injected: How many faults of each kind were injected.
        calls: How many calls were made, faulty or not.

    Raises:
        ConfigError: ``rate`` is outside ``[0, 1]``, ``kinds`` is empty or holds an unknown
            kind, or ``hang_s`` is negative.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        rate: float,
        kinds: Sequence[FaultKind] = FAULT_KINDS,
        seed: int = 0,
        when: Callable[[ModelRequest], bool] | None = None,
        hang_s: float = 60.0,
        retry_after_s: float | None = 0.0,
    ):
        if not 0 <= rate <= 1:
            raise ConfigError(f"must be between 0 and 1, got {rate}", field="rate")
        unknown = [k for k in kinds if k not in FAULT_KINDS]
        if not kinds or unknown:
            raise ConfigError(
                f"must name some of {', '.join(FAULT_KINDS)}, got {list(kinds)}", field="kinds"
            )
        if hang_s < 0:
            raise ConfigError(f"must be 0 or more, got {hang_s}", field="hang_s")
        self.model_id = model.model_id
        self.context_window = model.context_window
        self._model = model
        self._rate = rate
        self._kinds = tuple(FaultKind(k) for k in kinds)
        self._random = random.Random(seed)
        self._when = when
        self._hang_s = hang_s
        self._retry_after_s = retry_after_s
        self.injected: Counter[FaultKind] = Counter()
        self.calls = 0

    def __repr__(self) -> str:
        return f"FaultInjectingModel({self._model!r}, rate={self._rate})"

    async def request(self, request: ModelRequest) -> ModelResponse:
        """Fail (or hang) if this call's draw says so; otherwise call the wrapped model.

        Raises:
            ModelError: An injected transient fault (``transient`` is true).
        """
        self.calls += 1
        if (self._when is None or self._when(request)) and self._random.random() < self._rate:
            kind = self._random.choice(self._kinds)
            self.injected[kind] += 1
            if kind == FaultKind.HANG:
                await asyncio.sleep(self._hang_s)
            else:
                raise self._error(kind)
        return await self._model.request(request)

    def _error(self, kind: FaultKind) -> ModelError:
        if kind == FaultKind.CONNECTION:
            return ModelError(
                "injected fault: connection refused", model_id=self.model_id, transient=True
            )
        if kind == FaultKind.TIMEOUT:
            return ModelError(
                "injected fault: request timed out", model_id=self.model_id, transient=True
            )
        if kind == FaultKind.RATE_LIMIT:
            return ModelError(
                "injected fault: HTTP 429 Too Many Requests",
                model_id=self.model_id,
                transient=True,
                status_code=429,
                retry_after_s=self._retry_after_s,
            )
        return ModelError(
            "injected fault: HTTP 503 Service Unavailable",
            model_id=self.model_id,
            transient=True,
            status_code=503,
        )

    @property
    def prompt_framing_tokens(self) -> int:
        """The wrapped model's `framing_tokens`."""
        return framing_tokens(self._model)

    def count_tokens(self, text: str) -> int:
        """The wrapped model's token count."""
        return self._model.count_tokens(text)
