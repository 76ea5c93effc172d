"""Model providers.

Every provider implements `ChatModel`: one async `request(ModelRequest) -> ModelResponse`
where the request wraps a `Prompt` built by the `ContextBuilder`. Model ids are
``"provider:name"``; `get_model` turns an id into a model.
"""

from clearance.models._base import (
    ChatModel,
    ModelRequest,
    ModelResponse,
    ToolCall,
    Usage,
    estimate_tokens,
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
    "get_model",
    "split_model_id",
]
