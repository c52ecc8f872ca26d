"""Memory models, chosen by MEMORY_MODEL. Provider modules are imported only when chosen,
so a function that never consolidates never pays for httpx or a Bedrock client."""

from __future__ import annotations

from botmemory.consolidation.model.contract import MemoryModel, MemoryModelError
from botmemory.settings.config import Settings, parse_model_spec

__all__ = ["MemoryModel", "MemoryModelError", "build_memory_model"]


def build_memory_model(settings: Settings) -> MemoryModel | None:
    """The configured model, or None when memory is off."""
    spec = settings.memory_model
    if not spec:
        return None
    provider, name = parse_model_spec("MEMORY_MODEL", spec)
    if provider == "rules":
        from botmemory.consolidation.model.rules import RulesModel

        return RulesModel()
    if provider == "bedrock":
        from botmemory.consolidation.model.bedrock import BedrockModel

        return BedrockModel(
            name,
            max_output_tokens=settings.model_max_output_tokens,
            timeout_seconds=settings.model_timeout_seconds,
            max_attempts=settings.model_max_attempts,
        )
    from botmemory.consolidation.model.openai_compat import OpenAICompatibleModel
    from botmemory.settings.config import model_api_key

    return OpenAICompatibleModel(
        name,
        base_url=settings.model_base_url,
        # Read now, when the model is built (MEMORY_MODEL_API_KEY_SECRET: from Secrets
        # Manager): a bad key setting fails the build, not the first batch.
        api_key=model_api_key(settings),
        timeout_seconds=settings.model_timeout_seconds,
        max_attempts=settings.model_max_attempts,
        max_output_tokens=settings.model_max_output_tokens,
    )
