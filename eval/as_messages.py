"""LoCoMo as a chat: each turn split into its sentences, sent one message at a time.

LoCoMo's turns are paragraphs (a median of about 124 characters): a rule that pays on
paragraphs may cost where people chat in short messages, as in the held-out set of issue 50
(real two-person messaging conversations), where the keyword-only block fell below BM25.
This writes a copy of LoCoMo's conversations in LoCoMo's own format with every turn cut at
its sentence ends, one message per sentence, so `make eval --dataset <folder>` measures the
same questions on short messages (a check on generalisation, not a dataset to tune on).

Each question's evidence moves to the pieces of its turns that hold a word of the answer
(eval.evidence's words), else to the longest piece (the statement, not the greeting), so a
question is neither easier nor harder for search than on whole turns. An image's caption
stays with the first piece.

    python -m eval.as_messages ../shared/datasets/locomo eval/.as-messages
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from eval.dataset import dia_ids
from eval.evidence import answer_words

# A sentence ends at ., ! or ? (and any run of them) before a space.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
_SESSION = re.compile(r"session_(\d+)$")


def pieces(text: str) -> list[str]:
    """The message's sentences, in order; the whole text when it has one."""
    return [p for p in _SENTENCE_END.split(text.strip()) if p] or [text]


def split_conversation(body: dict[str, Any]) -> dict[str, Any]:
    """A LoCoMo conversation (one file's body) with every turn cut into its sentences, new
    dia_ids numbered per session, and each question's evidence moved to the pieces."""
    conversation = body.get("conversation", body)
    out: dict[str, Any] = {}
    moved: dict[str, list[tuple[str, str]]] = {}  # old dia_id -> [(new dia_id, text)]
    for key, value in conversation.items():
        match = _SESSION.match(key)
        if match is None or not isinstance(value, list):
            out[key] = value
            continue
        turns: list[dict[str, Any]] = []
        for turn in value:
            for n, text in enumerate(pieces(str(turn.get("text", "")))):
                dia_id = f"D{match.group(1)}:{len(turns) + 1}"
                # An image's fields stay with the first piece, the message that carries it.
                kept = turn if n == 0 else {"speaker": turn["speaker"]}
                turns.append(kept | {"dia_id": dia_id, "text": text})
                for old in dia_ids([turn.get("dia_id")]):
                    moved.setdefault(old, []).append((dia_id, text))
        out[key] = turns
    questions = [_moved_question(q, moved) for q in body.get("qa", [])]
    result = {k: v for k, v in body.items() if k not in ("conversation", "qa")}
    if "conversation" in body:
        return result | {"conversation": out, "qa": questions}
    return out | {"qa": questions}


def _moved_question(question: dict[str, Any], moved: dict[str, list[tuple[str, str]]]) -> Any:
    answer = str(question.get("answer", ""))
    evidence: list[str] = []
    for old in dia_ids(question.get("evidence", [])):
        found = moved.get(old)
        if not found:  # no such turn: kept as it was, the reader skips what it lacks
            evidence.append(old)
            continue
        holding = [new for new, text in found if answer_words(text, answer)]
        evidence += holding or [max(found, key=lambda piece: len(piece[1]))[0]]
    return question | {"evidence": evidence}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m eval.as_messages", description=__doc__)
    parser.add_argument("source", type=Path, help="a folder of LoCoMo conversations")
    parser.add_argument("target", type=Path, help="where to write them as messages")
    args = parser.parse_args(argv)
    args.target.mkdir(parents=True, exist_ok=True)
    for path in sorted(args.source.glob("*.json")):
        body = json.loads(path.read_text(encoding="utf-8"))
        split = split_conversation(body)
        (args.target / path.name).write_text(json.dumps(split), encoding="utf-8")
        print(f"{path.name}: written to {args.target / path.name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
