"""Prompts and tools in the Anthropic Messages API's form (see `AnthropicModel`)."""

from __future__ import annotations

from typing import Any

from clearance._core.prompt import Prompt

__all__ = ["anthropic_tool", "to_anthropic_messages"]


def to_anthropic_messages(prompt: Prompt) -> tuple[str, list[dict[str, Any]]]:
    """The prompt's messages in the Messages API's form: ``(system, messages)``.

    The Messages API takes the system prompt apart from the conversation, so every system
    message (in order, joined by a blank line) becomes ``system``. User and assistant
    messages keep their order; consecutive messages of one role become one message with one
    text block each (the API wants the roles to alternate). Empty texts are left out (the
    API rejects empty text blocks).

    Args:
        prompt: The prompt from the `ContextBuilder`.

    Returns:
        The system text (``""`` for none) and the messages, each
        ``{"role": "user" | "assistant", "content": [{"type": "text", "text": ...}, ...]}``.
    """
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    for message in prompt.messages:
        if not message.content:
            continue
        if message.role == "system":
            system.append(message.content)
            continue
        block = {"type": "text", "text": message.content}
        if messages and messages[-1]["role"] == message.role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": message.role, "content": [block]})
    return "\n\n".join(system), messages


def anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    """One tool in the OpenAI function format → the Messages API's tool form."""
    function = tool.get("function", tool)
    converted: dict[str, Any] = {
        "name": function["name"],
        "input_schema": function.get("parameters") or {"type": "object", "properties": {}},
    }
    if function.get("description"):
        converted["description"] = function["description"]
    return converted
