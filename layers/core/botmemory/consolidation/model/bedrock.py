"""A memory model on Amazon Bedrock, through the Converse API.

Converse has no JSON-schema response mode common to every model, but every tool-capable model
accepts a tool with a JSON schema; forcing the call to that one tool makes its input the answer.
"""

from __future__ import annotations

from typing import Any

from botmemory.consolidation.model.contract import (
    ANSWER_SCHEMA,
    INSTRUCTIONS,
    RECOMPRESS_INSTRUCTIONS,
    RECOMPRESS_SCHEMA,
    ConsolidationAnswer,
    MemoryModelError,
    ModelInput,
    ModelUnavailable,
    parse_answer,
    parse_recompression,
    render_batch,
    render_recompression,
)
from botmemory.providers.aws_clients import ConverseCaller

TOOL_NAME = "record_memory"
_TOOL_DESCRIPTION = (
    "Record the durable facts stated by the participants of this batch, a short summary "
    "of what happened in it, and the channel's running summary."
)
RECOMPRESS_TOOL_NAME = "record_summary"
_RECOMPRESS_TOOL_DESCRIPTION = "Record the shortened channel summary."


class BedrockModel:
    """One Converse call per batch. Timeouts and retries (throttling, 5xx, transport errors)
    are botocore's, configured from the settings by botmemory.providers.aws_clients."""

    def __init__(
        self,
        model_id: str,
        *,
        client: Any | None = None,
        max_output_tokens: int = 2000,
        region_name: str | None = None,
        timeout_seconds: float = 30.0,
        max_attempts: int = 3,
    ) -> None:
        def caller(read_timeout_seconds: float) -> ConverseCaller:
            return ConverseCaller(
                model_id,
                error=MemoryModelError,
                client=client,
                region_name=region_name,
                read_timeout_seconds=read_timeout_seconds,
                max_attempts=max_attempts,
            )

        self._converse = caller(timeout_seconds)
        # botocore's read timeout is a client's: a call given more time (a backlog's) goes
        # through a client of its own, built when first needed.
        self._new_caller = caller
        self._timeout_seconds = timeout_seconds
        self._longer: dict[float, ConverseCaller] = {}
        self.name = self._converse.name
        self._max_output_tokens = max_output_tokens

    def _bedrock(self) -> Any:
        return self._converse.client()

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        try:
            tool_input = self._tool_input(
                INSTRUCTIONS,
                render_batch(batch),
                TOOL_NAME,
                _TOOL_DESCRIPTION,
                ANSWER_SCHEMA,
                max_tokens=batch.max_output_tokens,
                caller=self._caller(batch.timeout_seconds),
            )
        except MemoryModelError as exc:
            if _request_fault(exc):
                raise
            raise ModelUnavailable(str(exc)) from exc.__cause__
        return parse_answer(tool_input)

    def recompress(self, summary: str, target_chars: int) -> str:
        return parse_recompression(
            self._tool_input(
                RECOMPRESS_INSTRUCTIONS,
                render_recompression(summary, target_chars),
                RECOMPRESS_TOOL_NAME,
                _RECOMPRESS_TOOL_DESCRIPTION,
                RECOMPRESS_SCHEMA,
            )
        )

    def _caller(self, timeout_seconds: float | None) -> ConverseCaller:
        if timeout_seconds is None or timeout_seconds == self._timeout_seconds:
            return self._converse
        if timeout_seconds not in self._longer:
            self._longer[timeout_seconds] = self._new_caller(timeout_seconds)
        return self._longer[timeout_seconds]

    def _tool_input(
        self,
        instructions: str,
        user: str,
        tool: str,
        description: str,
        schema: dict[str, Any],
        *,
        max_tokens: int | None = None,
        caller: ConverseCaller | None = None,
    ) -> dict[str, Any]:
        """One Converse call forced to one tool; the tool call's input."""
        max_tokens = max_tokens or self._max_output_tokens
        response = (caller or self._converse).converse(
            system=[{"text": instructions}],
            messages=[{"role": "user", "content": [{"text": user}]}],
            toolConfig={
                "tools": [
                    {
                        "toolSpec": {
                            "name": tool,
                            "description": description,
                            "inputSchema": {"json": schema},
                        }
                    }
                ],
                "toolChoice": {"tool": {"name": tool}},
            },
            inferenceConfig={"maxTokens": max_tokens, "temperature": 0},
        )

        # A cut-off tool call can carry a partial input that happens to validate; refuse it.
        stop_reason = response.get("stopReason")
        if stop_reason == "max_tokens":
            raise MemoryModelError(f"{self.name} answer truncated (maxTokens={max_tokens})")

        content = response.get("output", {}).get("message", {}).get("content") or []
        for block in content:
            tool_use = block.get("toolUse") if isinstance(block, dict) else None
            if isinstance(tool_use, dict) and tool_use.get("name") == tool:
                tool_input = tool_use.get("input")
                if not isinstance(tool_input, dict):
                    raise MemoryModelError(f"{self.name} called {tool} without an object input")
                return tool_input
        raise MemoryModelError(f"{self.name} did not call {tool} (stopReason={stop_reason!r})")


def _request_fault(error: MemoryModelError) -> bool:
    """Whether Bedrock answered, or refused this request's content (ValidationException:
    its size, its shape); any other service or connection error says nothing of the batch."""
    from botocore.exceptions import BotoCoreError, ClientError

    cause = error.__cause__
    if isinstance(cause, ClientError):
        return cause.response.get("Error", {}).get("Code") == "ValidationException"
    return not isinstance(cause, BotoCoreError)
