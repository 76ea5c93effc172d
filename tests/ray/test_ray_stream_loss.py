"""A worker that dies while streaming an answer fails the attempt, as a dropped stream does.

Before, the executor sent the call again to another worker, whose text was handed to the
same sink after the dead worker's: the terminal (``--stream``) showed the start of one
answer and then another whole answer, with no sign of a new attempt, and each worker could
stream up to the caps again. A provider whose connection drops mid-stream raises a
transient `ModelError`, and `ModelCaller` retries it as a new attempt, which its listener
hears; a worker that dies before streaming anything is still replaced unseen.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_ray_executor import _prompt, first_call, ray, ray_head  # noqa: F401  (the module's Ray head)

from clearance import ModelError, RayExecutor
from clearance.models._base import ModelRequest
from clearance.testing._fake import FakeModel

pytestmark = pytest.mark.ray


def _dying_stream(flag: str, model_id: str, **options: Any) -> FakeModel:
    """Streams two pieces, then its worker dies (the first call only, across workers)."""

    class DyingStream(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            if not first_call(flag):
                return await super().request(request)
            assert request.stream is not None
            request.stream("first ")
            request.stream("words ")
            import asyncio

            await asyncio.sleep(0.5)  # the pieces reach the orchestrator
            os._exit(1)

    return DyingStream(model_id.partition(":")[2], latency_s=0)


@pytest.fixture(scope="module")
def by_value(ray_head: str) -> Iterator[str]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_head


async def test_a_worker_dying_mid_stream_fails_the_attempt_and_is_recorded(
    by_value: str, tmp_path: Path
) -> None:
    factory = functools.partial(_dying_stream, str(tmp_path / "died"))
    heard: list[str] = []
    recorded: list[tuple[Any, str, dict[str, Any]]] = []
    with RayExecutor(address=by_value, workers=2, cpus_per_worker=0,
                     model_factory=factory) as ex:  # fmt: skip
        ex.attach(lambda kind, subject, data: recorded.append((kind, subject, data)))
        request = ModelRequest(prompt=_prompt("x"), max_tokens=64, stream=heard.append)
        with pytest.raises(ModelError, match="died while streaming") as info:
            await ex.complete("fake:m", {}, request)
        assert info.value.transient is True
        assert heard == ["first ", "words "]  # nothing from another worker after them
        assert [data["retry"] for _, _, data in recorded] == [False]
        # The next attempt (the caller's retry) streams a whole answer of its own.
        again: list[str] = []
        request = ModelRequest(prompt=_prompt("x"), max_tokens=64, stream=again.append)
        response = await ex.complete("fake:m", {}, request)
        assert "".join(again) == response.text
