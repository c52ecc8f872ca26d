"""An OpenAI-compatible memory model on 127.0.0.1 that writes facts, as a hosted model would:
it reads the batch the project renders (`memory_model.contract.render_batch`) and, for each
observation whose words hold one of its phrases, proposes a fact about that observation's
author citing it. ConsolidateFunction reaches it through the project's own `openai:` client."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from tests.support.fake_providers import CompletionServer, serving

# One observation line of the rendered batch, with when it was said:
# `#3 [msg] 2026-03-02 Mon 14:05 "Carol" (user_id 42): "words"`.
OBSERVATION_LINE = re.compile(
    r'^#(\d+) \[(\w+)\] (?:\d{4}-\d\d-\d\d \w{3} \d\d:\d\d )?"(.*?)" \(user_id (\d+)\): "(.*)"$'
)


@dataclass(frozen=True)
class Teaching:
    """When an observation holds `phrase`, the fact `text` (with `{name}`) about its author."""

    phrase: str
    text: str
    kind: str = "fact"
    scope: str = "user"


@dataclass
class FactWriter:
    teachings: list[Teaching] = field(default_factory=list)
    batches: list[str] = field(default_factory=list)  # the user messages it was sent
    # When set, the short-term line (with `{name}`) it writes for each member who spoke;
    # None: its answers carry no `recent` (as a model of the older contract).
    recent_line: str | None = None
    # Called with each batch as it arrives (a test's clock moves while the model thinks).
    on_batch: Callable[[str], None] | None = None
    # For a batch: None to answer it, "unusable" to answer with what is no contract's
    # answer, or an HTTP status to refuse it with (a provider that is down or throttles).
    fails: Callable[[str], int | str | None] | None = None

    def answer(self, batch: str) -> dict[str, Any]:
        facts = []
        recent: dict[str, str] = {}
        for line in batch.splitlines():
            found = OBSERVATION_LINE.match(line)
            if not found:
                continue
            number, kind, name, user_id, words = found.groups()
            if self.recent_line is not None and kind == "msg":
                recent[user_id] = self.recent_line.format(name=name)
            for teaching in self.teachings:
                if teaching.phrase.lower() in words.lower():
                    facts.append(
                        {
                            "user_id": user_id,
                            "text": teaching.text.format(name=name),
                            "kind": teaching.kind,
                            "evidence": [int(number)],
                            "supersedes": [],
                            "scope": teaching.scope,
                        }
                    )
        answer: dict[str, Any] = {
            "facts": facts,
            "episode": {"summary": "Members talked.", "participants": []},
            "channel_summary": "",
        }
        if self.recent_line is not None:
            answer["recent"] = [{"user_id": u, "line": text} for u, text in recent.items()]
        return answer


class _Server(CompletionServer):
    def __init__(self, writer: FactWriter) -> None:
        super().__init__()
        self.writer = writer

    def answer(self, user_message: str) -> dict[str, Any]:
        self.writer.batches.append(user_message)
        if self.writer.fails and self.writer.fails(user_message) == "unusable":
            return {"facts": "not a list"}
        return self.writer.answer(user_message)

    def refusal(self, user_message: str) -> int | None:
        if self.writer.on_batch:
            self.writer.on_batch(user_message)
        failure = self.writer.fails(user_message) if self.writer.fails else None
        return failure if isinstance(failure, int) else None


@dataclass
class RunningWriter:
    writer: FactWriter
    base_url: str

    def environment(self) -> dict[str, str]:
        """What a function is given to consolidate with it."""
        return {
            "MEMORY_MODEL": "openai:memory-test",
            "MEMORY_MODEL_BASE_URL": self.base_url,
            "MEMORY_MODEL_API_KEY": "sk-test-memory",
            "MEMORY_MODEL_API_KEY_SECRET": "",
        }


@pytest.fixture
def fact_writer() -> Iterator[RunningWriter]:
    writer = FactWriter()
    with serving(_Server(writer)) as server:
        yield RunningWriter(writer, server.base_url)
