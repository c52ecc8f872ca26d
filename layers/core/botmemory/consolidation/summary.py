"""The rolling channel summary: one running summary of a channel's whole conversation.

Each consolidation round hands the memory model the current summary with the batch, and the
model returns it rewritten in the same call (no extra call). When the new summary is over
MEMORY_SUMMARY_MAX_TOKENS (estimated as characters / 4), one more pass asks the model to
recompress it towards MEMORY_SUMMARY_RECOMPRESS_RATIO of its length: one pass only, a
warning with both sizes when it is still over, and the current summary kept when that pass
fails or gives nothing shorter. What is stored is cut to MEMORY_SUMMARY_MAX_CHARS.

The summary it replaces is archived (botmemory.storage.keys.SUMMARY_ARCHIVE_PREFIX), searchable until
it expires like an episode. Both carry who spoke in the stretch they cover, so `/forgetme`
deletes every summary a person's words went into.

A summary's stretch (`start_ms`..`end_ms`) spans the times of the messages whose words it
took in (a message's time is its id's: an edit counts at its message's time), and only
grows as it rolls. A message deleted in Discord inside that stretch may live on in the
paraphrase, which no one can reliably take one message out of: the round that sees the delete
drops every summary covering it (the current one in its transaction, the archives just before
it), and the channel's next summary is built from what is left.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from botmemory.clock import DAY_MS, epoch_seconds
from botmemory.consolidation.model.contract import MemoryModel
from botmemory.records import ChannelSummary, Episode, Observation
from botmemory.settings.config import Settings
from botmemory.snowflake import snowflake_ms
from botmemory.storage import keys
from botmemory.text import clean, content_hash, short_id

log = logging.getLogger(__name__)

# People a summary remembers as its speakers, newest first; beyond, `more_participants`.
MAX_SUMMARY_PARTICIPANTS = 100
CHARS_PER_TOKEN = 4
# What a model may return for the summary before it is judged: far above any cap.
MAX_PROPOSED_CHARS = 40_000


def estimated_tokens(text: str) -> int:
    return len(text) // CHARS_PER_TOKEN


def message_times(message_ids: Iterable[str]) -> list[int]:
    """When these messages were said (their ids' time), sorted, each once; an id that is
    not a Discord id (digits, at most 20) names no time and is skipped."""
    return sorted({snowflake_ms(m) for m in message_ids if m.isdigit() and len(m) <= 20})


def stretch(observations: Iterable[Observation]) -> tuple[int, int] | None:
    """The stretch of conversation these observations (the ones the model was shown) hold
    words of: the times of their messages; None when there are none."""
    times = [
        snowflake_ms(o.message_id) if o.message_id and o.message_id.isdigit() else o.at_ms
        for o in observations
    ]
    return (min(times), max(times)) if times else None


def covers(summary: Episode, times: Iterable[int]) -> bool:
    """Whether a summary's stretch holds any of these times (may hold those words)."""
    return any(summary.start_ms <= t <= summary.end_ms for t in times)


@dataclass
class RolledSummary:
    """What a round does to the channel summary: the new one (None: the current one stays),
    the one it replaces, archived, and whether a recompression pass was made."""

    summary: ChannelSummary | None = None
    archived: ChannelSummary | None = None
    recompressed: bool = False


def roll(
    current: ChannelSummary | None,
    proposed: str,
    *,
    model: MemoryModel | None,
    settings: Settings,
    channel_id: str,
    speakers: dict[str, str],
    start_ms: int,
    end_ms: int,
    now_ms: int,
) -> RolledSummary:
    """The channel summary after a batch whose model answer proposed `proposed`.

    `speakers` are the batch's people (id -> name). Nothing changes when the model gave no
    summary, gave back the current one, or the recompression it needed failed or could not
    be made (`model` None: no time left for that call)."""
    rolled = RolledSummary()
    text = clean(proposed, MAX_PROPOSED_CHARS)
    if text and estimated_tokens(text) > settings.summary_max_tokens:
        if model is None:
            return rolled
        rolled.recompressed = True
        text = _recompressed(model, text, settings, channel_id)
    text = clean(text, settings.summary_max_chars)
    if not text or (current is not None and text == current.summary):
        return rolled
    ids = list(speakers) + [
        p for p in (current.participant_ids if current else []) if p not in speakers
    ]
    names_of = (
        dict(zip(current.participant_ids, current.participant_names, strict=False))
        if current
        else {}
    )
    names_of.update(speakers)
    rolled.summary = ChannelSummary(
        channel_id=channel_id,
        episode_id=short_id(content_hash(channel_id, text, str(now_ms))),
        sk=keys.SUMMARY_SK,
        summary=text,
        participant_ids=ids[:MAX_SUMMARY_PARTICIPANTS],
        participant_names=[names_of.get(p, p) for p in ids[:MAX_SUMMARY_PARTICIPANTS]],
        more_participants=len(ids) > MAX_SUMMARY_PARTICIPANTS
        or (current is not None and current.more_participants),
        # It holds everything it held: its stretch only grows (late words included).
        start_ms=min(current.start_ms, start_ms) if current else start_ms,
        end_ms=max(current.end_ms, end_ms) if current else end_ms,
        created_ms=now_ms,
        expires_at=epoch_seconds(now_ms + settings.episode_retention_days * DAY_MS),
    )
    if current is not None:
        # Archived as it was written: it expires when it would have (retained like episodes).
        rolled.archived = current.model_copy(
            update={"sk": keys.summary_archive_sk(now_ms, current.episode_id)}
        )
    return rolled


def _recompressed(model: MemoryModel, text: str, settings: Settings, channel_id: str) -> str:
    """One recompression pass; "" (keep the current summary) when it fails or gives nothing
    shorter."""
    target = max(1, int(len(text) * settings.summary_recompress_ratio))
    try:
        shorter = clean(model.recompress(text, target), MAX_PROPOSED_CHARS)
    except Exception as exc:  # the batch's facts and episode still stand
        log.warning(
            "summary recompression failed; the current summary is kept",
            extra={"channel_id": channel_id, "error": repr(exc)[:300]},
        )
        return ""
    if not shorter or len(shorter) >= len(text):
        log.warning(
            "summary recompression gave nothing shorter; the current summary is kept",
            extra={
                "channel_id": channel_id,
                "before_chars": len(text),
                "after_chars": len(shorter),
            },
        )
        return ""
    if estimated_tokens(shorter) > settings.summary_max_tokens:
        log.warning(
            "summary still over its size after one recompression",
            extra={
                "channel_id": channel_id,
                "before_tokens": estimated_tokens(text),
                "after_tokens": estimated_tokens(shorter),
                "max_tokens": settings.summary_max_tokens,
            },
        )
    return shorter
