"""How long a simulated memory model call takes: a fixed latency (1, 3 or 12 s) plus a cost per
1,000 input and output tokens, so that a bigger batch is slower, as in production.

The per-token costs come from a hosted model's published throughput: LLMPerf run against
Amazon Bedrock (huggingface.co/datasets/ssong1/llmperf-bedrock, anthropic.claude-instant-v1,
100 requests): output at 65.6 tokens/s (median), so 15.2 s per 1,000 output tokens; time to
first token 1.09 s (median) for a 252-token prompt and 1.21 s for a 1,024-token one, so about
0.16 s per 1,000 more input tokens.

A call's answer is counted at the size bench/prices.toml assumes for a round
(memory_model_output_tokens, 600) or the rules model's own answer, whichever is larger, and
never beyond the call's allowance (a backlog's call has twice a normal one's).
"""

from __future__ import annotations

import json
import math

from world import CountingModel

from botmemory.consolidation.model.contract import (
    ANSWER_SCHEMA,
    INSTRUCTIONS,
    ConsolidationAnswer,
    ModelInput,
    render_batch,
)
from botmemory.settings.config import Settings

OUTPUT_MS_PER_1000 = 15_244  # 1,000 / 65.6 tokens per second
INPUT_MS_PER_1000 = 155  # (1.21 s - 1.09 s) over 772 more prompt tokens
ANSWER_TOKENS = 600  # bench/prices.toml: memory_model_output_tokens
CHARS_PER_TOKEN = 4  # bench/prices.toml: chars_per_token
PROMPT_TOKENS = (len(INSTRUCTIONS) + len(json.dumps(ANSWER_SCHEMA))) // CHARS_PER_TOKEN


def call_ms(fixed_ms: int, input_tokens: int, output_tokens: int) -> int:
    return (
        fixed_ms
        + math.ceil(input_tokens * INPUT_MS_PER_1000 / 1000)
        + math.ceil(output_tokens * OUTPUT_MS_PER_1000 / 1000)
    )


class TimedModel(CountingModel):
    """The counted rules model; each call's simulated length, from its tokens, kept."""

    name = "rules (counted, timed)"

    def __init__(self, fixed_ms: int) -> None:
        super().__init__()
        self.fixed_ms = fixed_ms
        self.durations: list[int] = []
        self.sizes: list[tuple[int, int]] = []  # (input tokens, output tokens) per call
        self.longest_allowed_ms = 0  # the timeout of the longest call, to check against

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        answer = super().consolidate(batch)
        settings = Settings()
        allowance = batch.max_output_tokens or settings.model_max_output_tokens
        written = len(answer.model_dump_json()) // CHARS_PER_TOKEN
        output_tokens = min(max(ANSWER_TOKENS, written), allowance)
        input_tokens = PROMPT_TOKENS + len(render_batch(batch)) // CHARS_PER_TOKEN
        self.sizes.append((input_tokens, output_tokens))
        self.durations.append(call_ms(self.fixed_ms, input_tokens, output_tokens))
        timeout_ms = int((batch.timeout_seconds or settings.model_timeout_seconds) * 1000)
        self.longest_allowed_ms = max(self.longest_allowed_ms, timeout_ms)
        return answer

    def recompress(self, summary: str, target_chars: int) -> str:
        shorter = super().recompress(summary, target_chars)
        self.durations.append(
            call_ms(self.fixed_ms, len(summary) // CHARS_PER_TOKEN, len(shorter) // CHARS_PER_TOKEN)
        )
        return shorter
