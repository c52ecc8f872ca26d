"""Chat models, chosen by CHAT_MODEL (docs/architecture.md section 10). Provider modules are imported
only when chosen, so a function that never answers never pays for httpx or a Bedrock client."""

from __future__ import annotations

from botmemory.answering.chat.contract import (
    UPDATE_MEMORY,
    ChatModel,
    ChatModelError,
    ChatReply,
    ChatRequest,
    ChatTurn,
    ToolCall,
    ToolSpec,
)
from botmemory.settings.config import Settings, chat_api_key, parse_model_spec

__all__ = [
    "UPDATE_MEMORY",
    "ChatModel",
    "ChatModelError",
    "ChatReply",
    "ChatRequest",
    "ChatTurn",
    "ToolCall",
    "ToolSpec",
    "build_chat_model",
    "chat_api_key",
]


def build_chat_model(settings: Settings) -> ChatModel | None:
    """The configured model, or None when the bot does not answer (CHAT_MODEL unset)."""
    spec = settings.chat_model
    if not spec:
        return None
    # Settings already refuse any other form; parse_model_spec still guards a Settings built
    # without validation.
    provider, name = parse_model_spec("CHAT_MODEL", spec)
    if provider == "rules":
        from botmemory.answering.chat.rules import RulesChatModel

        return RulesChatModel()
    if provider == "bedrock":
        from botmemory.answering.chat.bedrock import BedrockChatModel

        return BedrockChatModel(
            name,
            max_output_tokens=settings.chat_max_output_tokens,
            timeout_seconds=settings.chat_timeout_seconds,
            max_attempts=settings.chat_max_attempts,
        )
    from botmemory.answering.chat.openai_compat import OpenAIChatModel

    return OpenAIChatModel(
        name,
        base_url=settings.chat_base_url or settings.model_base_url,
        # Read now, when the model is built (CHAT_MODEL_API_KEY_SECRET: from Secrets
        # Manager): a bad key setting fails the build, not the first answer.
        api_key=chat_api_key(settings),
        timeout_seconds=settings.chat_timeout_seconds,
        max_attempts=settings.chat_max_attempts,
        max_output_tokens=settings.chat_max_output_tokens,
    )
