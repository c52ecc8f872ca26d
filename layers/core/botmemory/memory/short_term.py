"""Short-term cross-channel memory: what each person did lately in the server's other public
channels, so that moving from #dev to #general keeps the thread.

An entry is one line saying what a person's recent exchange in a public channel was about
("asked the bot to help debug the auth middleware test"), written two ways, never per event:

- by a consolidation round there: the memory model's answer carries an optional one-line
  `recent` summary per person who spoke in the batch (validated here: scrubbed, one line, at
  most LINE_CHARS; an empty line writes nothing);
- by the answer path, from its own exchange, after the answer is posted: one entry for the
  asker, built from the question and the answer without another model call.

Each replaces the person's entry for that channel unless that one is newer. Only a channel
that @everyone can view crosses (`crosses_channels`; unknown counts as private): nothing from
a private channel, a direct message or an opted-out person is ever written. Entries expire
after MEMORY_SHORT_TERM_HOURS; a person keeps at most MEMORY_SHORT_TERM_PER_PERSON.

Deleted means gone: an entry keeps pointers to the messages it was made from and a digest of
their words. Recall reads them as the table holds them now and shows the line only while
every one is still held and unchanged (not deleted, not redacted, not erased). Recall shows
the entries of the people in the conversation, from channels other than the one it is asked
for, newest first, within MEMORY_RECALL_SHORT_TERM_CHARS.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from botmemory.clock import HOUR_MS, epoch_seconds, ttl_alive
from botmemory.records import Observation, ObservationKind, ShortTermEntry, scope_of
from botmemory.settings.config import Settings
from botmemory.snowflake import snowflake_ms
from botmemory.storage.keys import observation_sk
from botmemory.storage.repository import MemoryRepository
from botmemory.text import clip, content_hash, scrub, short_id

log = logging.getLogger(__name__)

# A line is at most this long (the block quotes it whole).
LINE_CHARS = 160
# Of a line the answer path writes, the question takes at most this much; the answer the rest.
QUESTION_CHARS = 90
# A line in the block is never shorter than this (its time, name and channel alone take
# about 60): recall reads the sources of at most budget // MIN_LINE_CHARS entries.
MIN_LINE_CHARS = 80

Barred = Callable[[Iterable[str]], set[str]]


def one_line(text: object) -> str:
    """A summary line as stored: scrubbed, one line, at most LINE_CHARS; "" for anything
    that is not a string or holds nothing."""
    if not isinstance(text, str):
        return ""
    return clip(scrub(text), LINE_CHARS)


def digest(sources: Iterable[Observation]) -> str:
    """What an entry's messages said, as a short hash: recall compares it to what the table
    holds now, so a message redacted or erased since hides the line."""
    return short_id(content_hash(*(o.content for o in sources)), 16)


def crosses_channels(repository: MemoryRepository, scope: str, channel_id: str) -> bool:
    """Whether a channel may leave short-term entries: a server channel that @everyone can
    view (never a direct message, never a private or unknown channel)."""
    return scope != scope_of(None) and repository.channel_is_public(scope, channel_id)


# Written by a round -------------------------------------------------------------------


def entries_for_round(
    observations: Iterable[Observation],
    lines: Mapping[str, object],
    *,
    scope: str,
    channel_id: str,
    bot_user_id: str | None,
    settings: Settings,
    now_ms: int,
) -> list[ShortTermEntry]:
    """One entry per person whose words the round consumed (people only, not the bot) and
    for whom the model wrote a line; its sources are their messages and the bot's answers to
    them (the words the line was made from), as the round consumed them."""
    ordered = sorted(observations, key=lambda o: (o.at_ms, o.sk))
    said: dict[str, list[Observation]] = {}
    for obs in ordered:
        if (
            obs.kind == ObservationKind.MESSAGE
            and obs.content.strip()
            and obs.author_id
            and not obs.author_is_bot
            and obs.author_id != bot_user_id
        ):
            said.setdefault(obs.author_id, []).append(obs)
    expires_at = epoch_seconds(now_ms + settings.short_term_hours * HOUR_MS)
    entries: list[ShortTermEntry] = []
    for user_id, messages in said.items():
        line = one_line(lines.get(user_id))
        if not line:  # the model had nothing to say of them: nothing written
            continue
        theirs = {m.message_id for m in messages if m.message_id}
        answers = [o for o in ordered if o.kind == ObservationKind.ANSWER and o.reply_to in theirs]
        sources = sorted(messages + answers, key=lambda o: (o.at_ms, o.sk))
        entries.append(
            ShortTermEntry(
                scope=scope,
                user_id=user_id,
                channel_id=channel_id,
                summary=line,
                observation_sks=[o.sk for o in sources],
                digest=digest(sources),
                messages=len(messages),
                at_ms=messages[-1].at_ms,
                expires_at=expires_at,
            )
        )
    return entries


# Written by the answer path -------------------------------------------------------------


def answered_line(question: str, answer: str) -> str:
    """`asked the bot: <question> — it answered: <answer>`, in LINE_CHARS, the question
    first; "" when there is no question."""
    asked = clip(scrub(question), QUESTION_CHARS)
    if not asked:
        return ""
    line = f"asked the bot: {asked}"
    room = LINE_CHARS - len(line) - len(" — it answered: ")
    answered = scrub(answer)
    if answered and room >= 20:
        line += f" — it answered: {clip(answered, room)}"
    return one_line(line)


def note_answered(
    repository: MemoryRepository,
    settings: Settings,
    barred: Barred,
    *,
    guild_id: str | None,
    channel_id: str,
    asker_id: str,
    question: str,
    question_message_id: str | None,
    answer: str,
    answer_message_ids: list[str],
    now_ms: int,
) -> ShortTermEntry | None:
    """After an answer is posted: in a public server channel, the asker's entry for it, from
    the question and the answer (no model call), pointing at the question's message and the
    answer's. Returns the entry written, or None (a private channel, a direct message, an
    opted-out asker, messages not held, or nothing to say). Never raises: the answer stands."""
    try:
        scope = scope_of(guild_id)
        keep = settings.short_term_per_person
        line = answered_line(question, answer)
        if keep == 0 or not line or not crosses_channels(repository, scope, channel_id):
            return None
        if asker_id in barred([asker_id]):
            return None
        sources = _exchange(repository, channel_id, question_message_id, answer_message_ids)
        if not sources:
            return None
        entry = ShortTermEntry(
            scope=scope,
            user_id=asker_id,
            channel_id=channel_id,
            summary=line,
            observation_sks=[o.sk for o in sources],
            digest=digest(sources),
            messages=1,
            at_ms=max(o.at_ms for o in sources),
            expires_at=epoch_seconds(now_ms + settings.short_term_hours * HOUR_MS),
        )
        repository.record_short_term(entry, keep)
    except Exception as exc:  # short-term memory is never a reason to lose an answer
        log.warning(
            "short-term entry of an answer not written",
            extra={"channel_id": channel_id, "error": repr(exc)[:300]},
        )
        return None
    return entry


def _exchange(
    repository: MemoryRepository,
    channel_id: str,
    question_message_id: str | None,
    answer_message_ids: list[str],
) -> list[Observation]:
    """The question's observation and the answer's, as stored (one read); [] when the
    question's is not held (then its deletion could not hide the line)."""
    wanted: list[str] = []
    question_sk = None
    if question_message_id:
        question_sk = observation_sk(
            snowflake_ms(question_message_id), ObservationKind.MESSAGE, question_message_id
        )
        wanted.append(question_sk)
    for message_id in answer_message_ids:
        at_ms = snowflake_ms(message_id)
        # Stored as an answer when ingest knows the bot's id, as a message otherwise.
        for kind in (ObservationKind.ANSWER, ObservationKind.MESSAGE):
            wanted.append(observation_sk(at_ms, kind, message_id))
    held = repository.messages_still_held({channel_id: wanted}).get(channel_id, [])
    if question_sk is not None and question_sk not in {o.sk for o in held}:
        return []
    return sorted(held, key=lambda o: (o.at_ms, o.sk))


# Shown by recall ------------------------------------------------------------------------


@dataclass(frozen=True)
class RecentElsewhere:
    """One entry as recall shows it: its line, and the messages it was made from as stored
    now (its person's own among them name them)."""

    entry: ShortTermEntry
    sources: list[Observation]

    @property
    def name(self) -> str:
        own = [o.author_name for o in self.sources if o.author_id == self.entry.user_id]
        return next((n for n in reversed(own) if n), "")


def recent_elsewhere(
    repository: MemoryRepository,
    entries: dict[str, list[ShortTermEntry]],
    *,
    channel_id: str,
    now_ms: int,
    per_person: int,
    budget_chars: int,
) -> list[RecentElsewhere]:
    """The people's live entries from other channels, newest first, as many as the budget
    could show, each only while every message it was made from is still held unchanged
    (one read for them all)."""
    live = sorted(
        (
            entry
            for person_entries in entries.values()
            for entry in person_entries[:per_person]
            if entry.channel_id != channel_id
            and entry.summary
            and entry.observation_sks
            and ttl_alive(entry.expires_at, now_ms)
        ),
        key=lambda e: e.at_ms,
        reverse=True,
    )[: max(1, budget_chars // MIN_LINE_CHARS)]
    wanted: dict[str, list[str]] = {}
    for entry in live:
        wanted.setdefault(entry.channel_id, []).extend(entry.observation_sks)
    held = repository.messages_still_held(wanted) if wanted else {}
    shown: list[RecentElsewhere] = []
    for entry in live:
        by_sk = {o.sk: o for o in held.get(entry.channel_id, [])}
        sources = [by_sk[sk] for sk in entry.observation_sks if sk in by_sk]
        if len(sources) == len(entry.observation_sks) and digest(sources) == entry.digest:
            shown.append(RecentElsewhere(entry, sources))
    return shown
