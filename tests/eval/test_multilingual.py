"""The multilingual set (eval/multilingual/): five languages, ten planted statements each."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eval.dataset import load_conversation

LANGUAGES = Path(__file__).parents[2] / "eval" / "multilingual"


@pytest.mark.parametrize("language", ["es", "de", "ja", "zh", "ko"])
def test_each_language_plants_ten_statements_asked_in_other_words(language: str) -> None:
    path = LANGUAGES / f"{language}.json"
    conversation = load_conversation(path)
    raw = json.loads(path.read_text(encoding="utf-8"))
    assert raw["language"] == language
    assert len(conversation.questions) == 10 and conversation.unanswerable == 0
    turns = {t.dia_id: t for t in conversation.turns}
    assert len(turns) > 20  # the statements sit among small talk
    for question in conversation.questions:
        (evidence,) = question.evidence
        statement = turns[evidence].text
        assert question.answer and question.answer in statement
        assert question.text not in statement  # a paraphrase, not the statement itself
