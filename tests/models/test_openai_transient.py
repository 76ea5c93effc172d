"""The OpenAI provider marks which failures are transient, with the server's Retry-After."""

import openai
import pytest

try:  # the HTTP library the installed openai SDK is built on
    import httpx2 as httpx
except ImportError:  # pragma: no cover
    import httpx

from clearance import ModelError
from clearance.models._openai import OpenAIModel


def openai_model(status, headers=None):
    def handler(request):
        if status is None:
            raise httpx.ConnectError("refused", request=request)
        if status == "timeout":
            raise httpx.ReadTimeout("slow", request=request)
        return httpx.Response(status, headers=headers or {}, json={"error": {"message": "no"}})

    client = openai.AsyncOpenAI(
        api_key="k",
        base_url="http://model.test/v1",
        max_retries=0,
        http_client=httpx.AsyncClient(transport=httpx.MockTransport(handler)),
    )
    return OpenAIModel("m", client=client)


@pytest.mark.parametrize(
    ("status", "headers", "transient", "retry_after"),
    [
        (429, {"Retry-After": "3"}, True, 3.0),
        (503, {}, True, None),
        (500, {"retry-after-ms": "250"}, True, 0.25),
        (400, {}, False, None),
        (401, {"Retry-After": "3"}, False, 3.0),
        (404, {}, False, None),
        (None, {}, True, None),
        ("timeout", {}, True, None),
    ],
)
async def test_failures_carry_transient_and_retry_after(
    make_prompt, status, headers, transient, retry_after
):
    from clearance.models import ModelRequest

    model = openai_model(status, headers)
    with pytest.raises(ModelError) as info:
        await model.request(ModelRequest(prompt=make_prompt(len)))
    assert info.value.transient is transient
    assert info.value.retry_after_s == retry_after
    assert info.value.status_code == (status if isinstance(status, int) else None)
    assert info.value.model_id == "openai:m"


def test_the_sdk_does_not_retry_by_default():
    assert OpenAIModel("m", base_url="http://model.test/v1")._client.max_retries == 0
