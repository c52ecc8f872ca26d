"""A recorded conversation replayed as Discord gateway events.

The conversation format is LoCoMo's (speaker_a, speaker_b, session_N_date_time, session_N
turns of {speaker, dia_id, text}): each conversation becomes one channel, each speaker one
user, each turn a MESSAGE_CREATE at its session's time. A turn that shares an image carries
it as an attachment whose alt text is LoCoMo's caption of the image (`blip_caption`): what
Discord gives the bot of a picture is its alt text.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from botmemory.snowflake import DISCORD_EPOCH_MS
from localrun.motoserver import LocalRunError

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_SAMPLE = Path(__file__).resolve().parent / "sample_conversation.json"
SHARED_DATASET = ROOT.parent / "shared" / "datasets" / "locomo"
GUILD_ID = "1100000000000000042"
CHANNEL_ID = "1200000000000000042"
# A second channel of the same server, where the demo asks recall after the replay.
GENERAL_ID = "1200000000000000043"
TURN_GAP_MS = 30_000


@dataclass(frozen=True)
class Replay:
    source: Path
    speakers: dict[str, str]  # name -> user id
    events: list[dict[str, Any]]
    guild_id: str = GUILD_ID
    channel_id: str = CHANNEL_ID
    general_id: str = GENERAL_ID
    # LoCoMo's questions whose evidence was all said in the first session: (question, answer).
    early_questions: tuple[tuple[str, str], ...] = ()


def guild_create(replay: Replay) -> dict[str, Any]:
    """The relay's GUILD_CREATE for the replay's server: both channels are public (@everyone
    may view them), so what is said in one may follow its speakers into the other."""
    view_channel = 1 << 10
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": replay.guild_id,
            "roles": [{"id": replay.guild_id, "permissions": str(view_channel)}],
            "channels": [
                {"id": replay.channel_id, "type": 0, "name": "conversation"},
                {"id": replay.general_id, "type": 0, "name": "general"},
            ],
        },
    }


def default_source() -> Path:
    """One LoCoMo conversation when the shared dataset is there, else the bundled sample."""
    candidates = sorted(SHARED_DATASET.glob("*.json")) if SHARED_DATASET.is_dir() else []
    return candidates[0] if candidates else BUNDLED_SAMPLE


def _session_start(text: str) -> datetime:
    # LoCoMo writes "1:56 pm on 8 May, 2023".
    cleaned = re.sub(r"\s+", " ", text.strip())
    return datetime.strptime(cleaned, "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def _snowflake(at_ms: int, sequence: int) -> str:
    return str(((at_ms - DISCORD_EPOCH_MS) << 22) | (sequence & 0xFFF))


def _attachments(turn: dict[str, Any], at_ms: int, sequence: int) -> list[dict[str, Any]]:
    caption = turn.get("blip_caption")
    if not isinstance(caption, str) or not caption.strip():
        return []
    return [
        {
            "id": _snowflake(at_ms, sequence + 2048),
            "filename": "image.jpg",
            "content_type": "image/jpeg",
            "description": caption.strip(),
        }
    ]


def load_replay(path: Path, limit: int | None = None) -> Replay:
    if not path.is_file():
        raise LocalRunError(f"no conversation at {path}: give an existing file with --dataset")
    try:
        conversation = json.loads(path.read_text(encoding="utf-8"))
        names = [conversation["speaker_a"], conversation["speaker_b"]]
    except (ValueError, KeyError, TypeError) as error:
        raise LocalRunError(f"{path} is not a conversation in LoCoMo's format ({error})") from None
    speakers = {name: str(1300000000000000100 + i) for i, name in enumerate(names)}
    events: list[dict[str, Any]] = []
    session = 1
    while f"session_{session}" in conversation:
        start = _session_start(conversation[f"session_{session}_date_time"])
        for turn_index, turn in enumerate(conversation[f"session_{session}"]):
            speaker = turn.get("speaker")
            if speaker not in speakers or not isinstance(turn.get("text"), str):
                continue
            at_ms = int(start.timestamp() * 1000) + turn_index * TURN_GAP_MS
            user_id = speakers[speaker]
            events.append(
                {
                    "t": "MESSAGE_CREATE",
                    "d": {
                        "id": _snowflake(at_ms, len(events)),
                        "channel_id": CHANNEL_ID,
                        "guild_id": GUILD_ID,
                        "author": {
                            "id": user_id,
                            "username": speaker.lower(),
                            "global_name": speaker,
                        },
                        "member": {"nick": None, "roles": []},
                        "content": turn["text"],
                        "timestamp": datetime.fromtimestamp(at_ms / 1000, tz=UTC).isoformat(),
                        "attachments": _attachments(turn, at_ms, len(events)),
                        "type": 0,
                    },
                }
            )
            if limit and len(events) >= limit:
                return Replay(path, speakers, events, early_questions=_early(conversation))
        session += 1
    if not events:
        raise LocalRunError(f"{path} holds no turns to replay")
    return Replay(path, speakers, events, early_questions=_early(conversation))


def _early(conversation: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    """Questions whose every evidence turn is in the first session (`D1:...`)."""
    found = []
    for qa in conversation.get("qa") or []:
        evidence = qa.get("evidence") or []
        if evidence and all(str(e).startswith("D1:") for e in evidence) and "answer" in qa:
            found.append((str(qa["question"]), str(qa["answer"])))
    return tuple(found)
