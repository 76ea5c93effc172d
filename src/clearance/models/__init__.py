"""Model providers.

Every provider implements `ChatModel`: one async `request(ModelRequest) -> ModelResponse`
where the request wraps a `Prompt` built by the `ContextBuilder`. Model ids are
``"provider:name"``; `get_model` turns an id into a model.
"""

import typing

from clearance._core import lazy as _lazy

if typing.TYPE_CHECKING:
    from clearance.models._base import (
        ChatModel,
        ModelRequest,
        ModelResponse,
        ToolCall,
        Usage,
        estimate_tokens,
        framing_tokens,
        split_model_id,
    )
    from clearance.models._registry import DEFAULT_MODEL_ID, PROVIDERS, get_model

__all__ = [
    "ChatModel",
    "DEFAULT_MODEL_ID",
    "ModelRequest",
    "ModelResponse",
    "PROVIDERS",
    "ToolCall",
    "Usage",
    "estimate_tokens",
    "framing_tokens",
    "get_model",
    "split_model_id",
]

_EXPORTS = {
    "ChatModel": "clearance.models._base",
    "DEFAULT_MODEL_ID": "clearance.models._registry",
    "ModelRequest": "clearance.models._base",
    "ModelResponse": "clearance.models._base",
    "PROVIDERS": "clearance.models._registry",
    "ToolCall": "clearance.models._base",
    "Usage": "clearance.models._base",
    "estimate_tokens": "clearance.models._base",
    "framing_tokens": "clearance.models._base",
    "get_model": "clearance.models._registry",
    "split_model_id": "clearance.models._base",
}
"""Each public name and the module that defines it, imported on first use."""

__getattr__, __dir__ = _lazy.lazy_exports(__name__, _EXPORTS)
