"""LoCoMo conversations as the evaluation reads them: turns with their `dia_id`s and the
Discord messages the replay makes of them, and the questions of categories 1 to 4 with their
evidence turns.

The gateway events come from `localrun.replay` (one channel per conversation, one user per
speaker, each turn a MESSAGE_CREATE on the conversation's own clock); this module only pairs
each event with the turn it was made from, so that anything memory keeps can be traced back
to LoCoMo's `dia_id`s.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from botmemory.ingest.observe import Attachment, with_alt_text
from botmemory.snowflake import snowflake_ms
from localrun.motoserver import LocalRunError
from localrun.replay import Replay, load_replay

# LoCoMo's categories (the dataset's README); 5, adversarial, is left out as usual.
CATEGORIES: dict[int, str] = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
# "D8:6", and the variants the dataset also holds: "D:11:26", "D30:05", "D9:1 D4:4; D4:6".
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")


@dataclass(frozen=True)
class Turn:
    dia_id: str
    speaker: str
    text: str
    message_id: str  # the snowflake of the MESSAGE_CREATE the replay made of it
    at_ms: int


@dataclass(frozen=True)
class Question:
    number: int  # its place in the conversation's `qa` list
    text: str
    category: int
    evidence: tuple[str, ...]  # dia_ids, only of turns that were replayed
    answer: str = ""  # LoCoMo's answer, as text (some are numbers)


@dataclass(frozen=True)
class Conversation:
    sample_id: str  # the file's stem: "26" for 26.json
    replay: Replay
    turns: list[Turn]
    questions: list[Question]
    unanswerable: int  # questions of categories 1-4 left out: no evidence among the turns

    @property
    def speakers(self) -> dict[str, str]:
        """Name -> Discord user id."""
        return self.replay.speakers


def dia_ids(evidence: Any) -> list[str]:
    """The dia_ids a question's evidence names, normalized ("D30:05" -> "D30:5")."""
    found: list[str] = []
    items = evidence if isinstance(evidence, list) else [evidence]
    for item in items:
        for session, turn in _DIA_ID.findall(str(item)):
            found.append(f"D{int(session)}:{int(turn)}")
    return list(dict.fromkeys(found))


def conversation_paths(dataset: Path, ids: list[str] | None) -> list[Path]:
    """The conversation files to evaluate, in the dataset's order (numeric by id)."""
    if not dataset.is_dir():
        raise LocalRunError(
            f"no LoCoMo dataset at {dataset}: give the folder of its conversations with --dataset"
        )
    paths = sorted(dataset.glob("*.json"), key=lambda p: (len(p.stem), p.stem))
    if not paths:
        raise LocalRunError(f"{dataset} holds no conversation (*.json)")
    if ids is None:
        return paths
    by_id = {p.stem: p for p in paths}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        raise LocalRunError(
            f"no conversation {', '.join(unknown)} in {dataset} (there are {', '.join(by_id)})"
        )
    return [by_id[i] for i in dict.fromkeys(ids)]


def load_conversation(path: Path, limit: int | None = None) -> Conversation:
    """One conversation, replayed as events, its first `limit` turns when given."""
    replay = load_replay(path, limit)
    raw = json.loads(path.read_text(encoding="utf-8"))
    turns = _pair(raw, replay)
    replayed = {t.dia_id for t in turns}
    questions: list[Question] = []
    unanswerable = 0
    for number, qa in enumerate(raw.get("qa", [])):
        if qa.get("category") not in CATEGORIES:
            continue
        evidence = tuple(d for d in dia_ids(qa.get("evidence", [])) if d in replayed)
        if not evidence or not isinstance(qa.get("question"), str):
            unanswerable += 1
            continue
        answer = qa.get("answer")
        text = "" if answer is None else str(answer)
        questions.append(Question(number, qa["question"], qa["category"], evidence, text))
    return Conversation(path.stem, replay, turns, questions, unanswerable)


def _pair(raw: dict[str, Any], replay: Replay) -> list[Turn]:
    """Each replayed event with the LoCoMo turn it was made from.

    The replay makes one event per turn that has a known speaker and a text, in session
    order; the turns are walked in that order and each event's content must be its turn's
    text, so a change in the replay cannot pair a message with the wrong dia_id unnoticed.
    """
    candidates = (
        turn
        for session in _sessions(raw)
        for turn in session
        if turn.get("speaker") in replay.speakers and isinstance(turn.get("text"), str)
    )
    turns: list[Turn] = []
    for event, turn in zip(replay.events, candidates, strict=False):
        payload = event["d"]
        if payload["content"] != turn["text"]:
            raise LocalRunError(f"{replay.source}: the replay's messages do not follow its turns")
        turns.append(
            Turn(
                dia_id=(dia_ids(turn.get("dia_id", "")) or [""])[0],
                speaker=turn["speaker"],
                # What the bot stores of the message: its words and its image's alt text.
                text=with_alt_text(
                    turn["text"],
                    [Attachment.model_validate(a) for a in payload.get("attachments") or []],
                ),
                message_id=payload["id"],
                at_ms=snowflake_ms(payload["id"]),
            )
        )
    if len(turns) != len(replay.events):
        raise LocalRunError(f"{replay.source}: the replay made more messages than it has turns")
    return turns


def _sessions(raw: dict[str, Any]) -> list[list[dict[str, Any]]]:
    sessions: list[list[dict[str, Any]]] = []
    number = 1
    while f"session_{number}" in raw:
        sessions.append(raw[f"session_{number}"])
        number += 1
    return sessions
