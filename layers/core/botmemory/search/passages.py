"""What of the table becomes search passages, and which passages hold a given item.

A consolidated batch gives one passage per message (its author's words, and the message
before it as context when the message is too short to stand alone, is a reply, or answers
a question someone else just asked), one per fact the round wrote, one for its episode and
one for the channel summary it archived. Every passage lists its sources (the sort keys of
the items it copies words from); each consumed observation stores the ids of the passages
holding its words, so the deletion or rewrite of that observation names the passages to
remove (botmemory.search.index_sync). Only people's own words are indexed: never the bot's
answers, never an opted-out person's words (the batch has already dropped them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from botmemory.clock import ttl_alive
from botmemory.records import (
    ChannelSummary,
    Episode,
    Fact,
    FactStatus,
    Observation,
    ObservationKind,
    Record,
)
from botmemory.search.keywords import stem, tokens
from botmemory.search.port import Passage, PassageKind
from botmemory.storage import keys

INDEXED_KINDS = {ObservationKind.MESSAGE, ObservationKind.EDIT}
# A message shorter than this ("yes, last Tuesday!") carries the message before it as
# context, so that the passage matches a question about what it answers.
STANDS_ALONE_CHARS = 120
CONTEXT_CHARS = 300
# A question mark ending a sentence, anywhere in a message ("What got you into running? Tell
# me!"); not one inside a link's query string.
_QUESTION_MARK = re.compile(r"\?(?=\s|$)")


# Words that acknowledge rather than say something ("ok", "lol", "thanks"): a message of
# nothing else, or of emoji and punctuation, carries no searchable content. Stopwords are
# already out of keywords.tokens.
_FILLER_TEXT = """
    ok okay k kk okk yes yeah yea yep yup ya nope nah lol lmao lmfao rofl haha hahaha hehe
    xd hmm hm mhm uh um oh ah wow nice cool thanks thank thx ty np gg sure true same omg
"""
FILLER = frozenset(stem(word) for word in _FILLER_TEXT.split())
# A custom emoji or a mention (<:name:id>, <a:name:id>, <@id>, <#id>, <@&id>) is no content.
_MARKUP = re.compile(r"<a?:\w{1,32}:\d{1,20}>|<(?:@[!&]?|#)\d{1,20}>")


def searchable(text: str) -> bool:
    """Whether a message says anything a search could find it by: at least one token that is
    not a filler word, once Discord's emoji and mention markup is taken out. "ok", "lol 😂",
    "👍" and "<:pepe:123>" say nothing; "ok, 7pm at the station" does."""
    return any(token not in FILLER for token in tokens(_MARKUP.sub(" ", text)))


def indexable(observation: Observation, bot_user_id: str | None) -> bool:
    """Whether a message gets a passage of its own (it may still be the context of the next
    one's): words by a person, not the bot, that carry searchable content (no embedding is
    paid for "ok" or an emoji)."""
    return (
        observation.kind in INDEXED_KINDS
        and bool(observation.message_id)
        and searchable(observation.content)
        and bool(observation.author_id)
        and not observation.author_is_bot
        and observation.author_id != bot_user_id
    )


LABEL_SEPARATOR = ": "
# A display name is at most 32 characters in Discord; a longer label is cut where stored.
MAX_LABEL_CHARS = 100


def _label(observation: Observation) -> str:
    return (observation.author_name or "someone")[:MAX_LABEL_CHARS]


def _labelled(observation: Observation, limit: int | None = None) -> str:
    text = observation.content if limit is None else observation.content[:limit]
    return f"{_label(observation)}{LABEL_SEPARATOR}{text}"


def keyword_text(passage: Passage) -> str:
    """What the keyword leg indexes of a passage: its text without the speaker labels its
    lines begin with, so a question naming Alice is not matched by every message of hers
    (recall's said-by rule promotes what the people a query names said). Each label is
    taken off where the passage's text has it: at the start, or at the start of a line."""
    text = passage.text
    kept: list[str] = []
    position = 0
    for label in passage.labels:
        prefix = label + LABEL_SEPARATOR
        if text.startswith(prefix, position):
            at = position
        else:
            line = text.find("\n" + prefix, position)
            if line < 0:
                continue
            at = line + 1
        kept.append(text[position:at])
        position = at + len(prefix)
    kept.append(text[position:])
    return "".join(kept)


def _earliest_expiry(observations: Iterable[Observation]) -> int | None:
    times = [o.expires_at for o in observations if o.expires_at is not None]
    return min(times) if times else None


def message_passages(
    observations: Iterable[Observation], scope: str, bot_user_id: str | None
) -> list[Passage]:
    """One passage per indexable message of a batch (its latest words: an edit replaces
    them), in time order."""
    words = sorted(
        (o for o in observations if indexable(o, bot_user_id)), key=lambda o: (o.at_ms, o.sk)
    )
    passages: dict[str, Passage] = {}
    for index, observation in enumerate(words):
        before = words[index - 1] if index else None
        context = before if before is not None and _needs_context(observation, before) else None
        parts = [observation] if context is None else [context, observation]
        text = "\n".join(_labelled(o, CONTEXT_CHARS if o is context else None) for o in parts)
        passage_id = keys.message_passage_id(observation.channel_id, observation.message_id or "")
        passages.pop(passage_id, None)  # re-inserted: the later words go last
        passages[passage_id] = Passage(
            id=passage_id,
            kind=PassageKind.MESSAGE,
            scope=scope,
            channel_id=observation.channel_id,
            text=text,
            time_ms=observation.at_ms,
            authors=list(dict.fromkeys(o.author_id for o in parts if o.author_id)),
            sources=[o.sk for o in parts],
            expires_at=_earliest_expiry(parts),
            labels=[_label(o) for o in parts],
        )
    return list(passages.values())


def _needs_context(observation: Observation, before: Observation) -> bool:
    """Whether a message is found by the words of the one before it: when it is short, a
    reply, or the answer to a question someone else asked ("What are your pets' names?"
    then "Luna and Oliver! They liven up the house": a question about pets finds it)."""
    return (
        len(observation.content) < STANDS_ALONE_CHARS
        or observation.reply_to is not None
        or (before.author_id != observation.author_id and _asks(before.content))
    )


def _asks(text: str) -> bool:
    return _QUESTION_MARK.search(text) is not None


def holders(passages: Iterable[Passage]) -> dict[str, list[str]]:
    """Observation sort key -> ids of the message passages that copy its words."""
    held: dict[str, list[str]] = {}
    for passage in passages:
        if passage.kind == PassageKind.MESSAGE:
            for sk in passage.sources:
                held.setdefault(sk, []).append(passage.id)
    return held


def fact_passage(fact: Fact, subject_name: str | None) -> Passage | None:
    """An active fact as a passage; its subject's name makes "what does Caroline like" match."""
    if fact.status != FactStatus.ACTIVE:
        return None
    return Passage(
        id=keys.fact_passage_id(fact.scope, fact.user_id, fact.fact_id),
        kind=PassageKind.FACT,
        scope=fact.scope,
        channel_id="",
        text=f"{subject_name}{LABEL_SEPARATOR}{fact.text}" if subject_name else fact.text,
        time_ms=fact.updated_ms,
        authors=[fact.user_id],
        sources=[keys.fact_sk(fact.fact_id)],
        expires_at=fact.expires_at,
        labels=[subject_name] if subject_name else [],
    )


def episode_passage(episode: Episode, scope: str) -> Passage:
    return Passage(
        id=keys.episode_passage_id(episode.channel_id, episode.episode_id),
        kind=PassageKind.EPISODE,
        scope=scope,
        channel_id=episode.channel_id,
        text=episode.summary,
        time_ms=episode.end_ms,
        authors=list(episode.participant_ids),
        sources=[episode.sk],
        expires_at=episode.expires_at,
    )


def summary_passage(archived: ChannelSummary, scope: str) -> Passage:
    """An archived channel summary, searchable like an episode until it expires."""
    return episode_passage(archived, scope).model_copy(
        update={"id": keys.summary_passage_id(archived.channel_id, archived.episode_id)}
    )


def source_keys(passage: Passage) -> list[tuple[str, str]]:
    """The table keys (pk, sk) of the items a passage copies, in its sources' order."""
    if passage.kind == PassageKind.FACT:
        subject = passage.authors[0] if passage.authors else ""
        return [(keys.user_pk(passage.scope, subject), sk) for sk in passage.sources]
    return [(keys.channel_pk(passage.channel_id), sk) for sk in passage.sources]


def still_held(passage: Passage, sources: list[Record], now_ms: int) -> bool:
    """Whether the table still holds, unchanged and alive, every item the passage copies:
    a passage whose source went (deleted, erased, expired) or was rewritten (a name
    redacted, a fact corrected or superseded) must not stay in the index."""
    if len(sources) != len(passage.sources):
        return False
    for record in sources:
        if not ttl_alive(getattr(record, "expires_at", None), now_ms):
            return False
        if not _same_words(passage, record):
            return False
    return True


def _same_words(passage: Passage, record: Record) -> bool:
    if isinstance(record, Observation):
        return record.content[:CONTEXT_CHARS] in passage.text
    if isinstance(record, Fact):
        return record.status == FactStatus.ACTIVE and record.text in passage.text
    if isinstance(record, Episode):
        return record.summary == passage.text
    return False
