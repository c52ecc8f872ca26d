"""eval.as_messages: LoCoMo's turns cut into one message per sentence, evidence moved along."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from eval.as_messages import main, pieces, split_conversation
from eval.dataset import load_conversation


def conversation() -> dict[str, Any]:
    return {
        "speaker_a": "Ann",
        "speaker_b": "Bo",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Ann", "dia_id": "D1:1", "text": "Hi Bo! I went to Lisbon. It was sunny."},
            {
                "speaker": "Bo",
                "dia_id": "D1:2",
                "text": "Nice. Look at this!",
                "img_url": ["https://example.invalid/a.jpg"],
                "blip_caption": "a photo of a boat",
            },
            {"speaker": "Ann", "dia_id": "D1:3", "text": "Ok"},
        ],
        "qa": [
            {
                "question": "Where did Ann go?",
                "answer": "Lisbon",
                "evidence": ["D1:1"],
                "category": 4,
            },
            {
                "question": "What did Bo show?",
                "answer": "boat",
                "evidence": ["D:1:2"],
                "category": 4,
            },
            {"question": "And?", "answer": "x", "evidence": ["D9:9"], "category": 4},
        ],
    }


def test_sentences_become_messages_and_evidence_moves_to_the_piece_holding_the_answer() -> None:
    assert pieces("Hi Bo! I went to Lisbon. It was sunny.") == [
        "Hi Bo!",
        "I went to Lisbon.",
        "It was sunny.",
    ]
    assert pieces("") == [""]
    split = split_conversation(conversation())
    turns = split["session_1"]
    assert [(t["dia_id"], t["speaker"], t["text"]) for t in turns] == [
        ("D1:1", "Ann", "Hi Bo!"),
        ("D1:2", "Ann", "I went to Lisbon."),
        ("D1:3", "Ann", "It was sunny."),
        ("D1:4", "Bo", "Nice."),
        ("D1:5", "Bo", "Look at this!"),
        ("D1:6", "Ann", "Ok"),
    ]
    # The image stays with the first piece of its message, and only there.
    assert turns[3]["blip_caption"] == "a photo of a boat" and "img_url" not in turns[4]
    where, shown, missing = split["qa"]
    assert where["evidence"] == ["D1:2"]  # the piece naming Lisbon
    assert shown["evidence"] == ["D1:5"]  # no piece holds "boat": the longest one
    assert missing["evidence"] == ["D9:9"]  # no such turn: left for the reader to skip
    assert split["speaker_a"] == "Ann" and split["session_1_date_time"].startswith("1:56")


def test_the_written_folder_replays_as_a_dataset(tmp_path: Path) -> None:
    source, target = tmp_path / "locomo", tmp_path / "messages"
    source.mkdir()
    (source / "7.json").write_text(json.dumps(conversation()), encoding="utf-8")
    assert main([str(source), str(target)]) == 0
    loaded = load_conversation(target / "7.json")
    assert len(loaded.turns) == 6
    assert [q.evidence for q in loaded.questions] == [("D1:2",), ("D1:5",)]
