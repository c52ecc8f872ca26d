"""An OpenAI-compatible memory model on 127.0.0.1 for the end-to-end run: it answers each
consolidation with one piece of persona knowledge ("Homework is due on Fridays here") when
at least two observations of the batch mention Friday, citing them, and nothing else."""

from __future__ import annotations

import re
from typing import Any

from tests.support.fake_providers import CompletionServer

KNOWLEDGE = "Homework is due on Fridays here"
_OBSERVATION = re.compile(r"^#(\d+) \[\w+\] .*: (.*)$")


def answer_for(batch_text: str) -> dict[str, Any]:
    numbers = [
        int(match.group(1))
        for line in batch_text.splitlines()
        if (match := _OBSERVATION.match(line)) and "Friday" in match.group(2)
    ]
    facts = []
    if len(numbers) >= 2:
        facts.append(
            {
                "user_id": "persona",
                "text": KNOWLEDGE,
                "kind": "fact",
                "evidence": numbers[:2],
                "supersedes": [],
                "scope": "persona",
            }
        )
    return {"facts": facts, "episode": {"summary": "They talked.", "participants": []}}


class FakeModel(CompletionServer):
    """The endpoint, answering by `answer_for`; `calls` counts its requests."""

    def answer(self, user_message: str) -> dict[str, Any]:
        return answer_for(user_message)
