"""A Ray worker's streamed text is held to the caps a provider streaming locally is held to.

Before: the items of a worker's stream were handed to the sink (the terminal, a
``--stream`` view) without any count: a worker (a compromised one, or a model made there
that ignores ``max_tokens``) could stream megabytes, or endless pieces, before its answer was
checked, and a call whose final answer was short then succeeded. Locally, the providers stop
a stream at `max_chunks` pieces and `max_response_chars` characters. An item ``("text", x)``
whose ``x`` is not text was skipped silently, so such items could go on until the deadline.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from test_ray_executor import _prompt, ray, ray_head  # noqa: F401  (the module's Ray head)

from clearance import ModelError, RayExecutor
from clearance._orchestration.ray_executor import _streamed
from clearance.models._base import ModelRequest, max_response_chars
from clearance.models._openai_stream import max_chunks
from clearance.testing._fake import FakeModel

pytestmark = pytest.mark.ray

MAX_TOKENS = 16
PIECES = 5000
PIECE = "x" * 100


def _flooding_model(model_id: str, **options: Any) -> FakeModel:
    """A fake model that streams far more than ``max_tokens`` allows, then answers briefly."""

    class Flooding(FakeModel):
        async def request(self, request: ModelRequest) -> Any:
            if request.stream is not None:
                for _ in range(PIECES):
                    request.stream(PIECE)
            return await super().request(request)

    return Flooding(model_id.partition(":")[2], latency_s=0)


@pytest.fixture(scope="module")
def by_value(ray_head: str) -> Iterator[str]:  # noqa: F811
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield ray_head


async def test_a_worker_flooding_the_stream_is_stopped_at_the_cap(by_value: str) -> None:
    heard: list[str] = []
    with RayExecutor(address=by_value, workers=1, cpus_per_worker=0,
                     model_factory=_flooding_model) as ex:  # fmt: skip
        request = ModelRequest(prompt=_prompt("flood"), max_tokens=MAX_TOKENS, stream=heard.append)
        started = time.monotonic()
        with pytest.raises(ModelError, match="max_response_chars"):
            await ex.complete("fake:m", {}, request)
        assert time.monotonic() - started < 30
        # The worker is free again and answers the next call normally.
        plain = ModelRequest(prompt=_prompt("calm"), max_tokens=MAX_TOKENS)
        assert (await ex.complete("fake:m", {}, plain)).text
    assert len(heard) <= max_chunks(MAX_TOKENS)
    assert sum(map(len, heard)) <= max_response_chars(MAX_TOKENS)


class _Items:
    """A stand-in for a Ray generator: the items, each awaited like an object reference."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __aiter__(self) -> _Items:
        return self

    async def __anext__(self) -> Any:
        if not self.items:
            raise StopAsyncIteration
        item = self.items.pop(0)

        async def ref() -> Any:
            return item

        return ref()


async def test_a_text_item_that_is_not_text_ends_the_stream_as_malformed() -> None:
    heard: list[str] = []
    items = _Items([("text", "a"), ("text", 5), *[("text", 6)] * 10, ("ok", None)])
    with pytest.raises(ModelError, match="not text"):
        await _streamed(items, heard.append, max_tokens=MAX_TOKENS, model_id="fake:m")
    assert heard == ["a"]


async def test_endless_empty_pieces_are_counted_too() -> None:
    items = _Items([("text", "")] * (max_chunks(MAX_TOKENS) + 10))
    with pytest.raises(ModelError, match="pieces"):
        await _streamed(items, lambda piece: None, max_tokens=MAX_TOKENS, model_id="fake:m")
