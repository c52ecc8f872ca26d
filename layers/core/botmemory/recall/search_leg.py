"""What a query changes in recall: the passages search finds, checked against the table, and
relevance-first order for facts and episodes (docs/architecture.md section 9).

Search fails open: it runs with its own time budget beside the table reads, and a timeout
or an error of the index or the embedding model leaves the block without its passages,
never the caller without an answer. Every hit is read back from the table before it is
shown: a passage whose message was deleted, erased, rewritten or has expired is dropped,
whatever the index still says.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from botmemory.clock import epoch_seconds, ttl_alive
from botmemory.memory.visibility import Visibility
from botmemory.recall.dates import DateMention, date_mentions, said_on, spans_of, tells_when
from botmemory.records import Episode, Fact, FactStatus, Observation, Record, scope_of
from botmemory.search import rules
from botmemory.search.embeddings import EmbeddingDimensionsError
from botmemory.search.fusion import reciprocal_rank_fusion
from botmemory.search.keywords import Bm25, tokens
from botmemory.search.passages import still_held
from botmemory.search.port import PassageKind, SearchHit, SearchIndex, SearchQuery
from botmemory.search.sources import passage_sources
from botmemory.settings.config import Settings
from botmemory.storage.repository import MemoryRepository

log = logging.getLogger(__name__)

# Hits asked of the index: about one per this many characters the passages could fill
# (their budget plus the facts' and episodes', which they inherit when unused), within
# bounds: some hits are dropped on checking, or shown as another's context, and a long
# message is shown as its snippet (`query_snippet`), so a passage line is short. Deep
# enough that the said-by boost has the named person's answers to reorder: `make eval`
# (docs/eval.md), strict, all ten conversations at 2,000 / 4,000 / 8,000 characters,
# keyword-only 72.9 / 81.7 / 86.5% at 30 and 100 against 71.8 / 80.9 / 85.5% at 80 and
# 50, the deployed path 76.6 / 85.2 / 90.0% against 75.7 / 84.7 / 89.3%, for one more
# BatchGetItem in the hits' read-back wave (no round trip added).
CHARS_PER_HIT = 30

# A message longer than this is shown in recall's block as the sentences that share the
# most words with the query (`query_snippet`), the JSON keeping it whole. Long enough that
# most messages are shown whole: a snippet keeps the query's words, and the answer is
# often in the sentence that does not repeat them ("what did she paint?" - "... it's a
# sunset"). `make eval` (docs/eval.md) at 4,000 characters, the strict count: 70.6% at
# 160 characters, 81.0% at 240, 82.3% at 400, fewer passages fitting costing less than
# the answers snippets dropped. The room beside the matching sentences goes to those nearest
# them, not to the message's first (keyword-only, all ten conversations: 1,180 / 1,306 /
# 1,358 of 1,536 questions held at 2,000 / 4,000 / 8,000 characters, 1,180 / 1,305 / 1,359
# in the message's order).
SNIPPET_CHARS = 400
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
ELLIPSIS = "…"
MIN_SEARCH_DEPTH = 12
MAX_SEARCH_DEPTH = 100


def search_depth(settings: Settings) -> int:
    room = settings.recall_search_chars + settings.recall_fact_chars + settings.recall_episode_chars
    return max(MIN_SEARCH_DEPTH, min(MAX_SEARCH_DEPTH, room // CHARS_PER_HIT))


# With a query, what the block keeps that the query is not about: a person's most used
# facts, and the latest episode (what is going on now). The rest of their room goes to the
# passages the query found. Both take only the room the passages leave (RankedFacts and
# RankedEpisodes, `if_room`): the answer path shows the asker's own facts and the channel's
# latest messages beside the block. `make eval` (docs/eval.md), strict, all ten
# conversations, keyword-only, held 1,180 / 1,305 / 1,359 of 1,536 questions at 2,000 /
# 4,000 / 8,000 characters so (with an episode's people's names not counted as relevance)
# against 1,156 / 1,296 / 1,355 with them in their sections' own room.
UNRELATED_FACTS_WITH_QUERY = 2
UNRELATED_EPISODES_WITH_QUERY = 1

# Two of a person's facts repeat each other when the words they share are at least this
# share of their words together ("Caroline is looking into counseling and mental health
# jobs", "Caroline has been looking into counseling or mental health work"): the block
# shows the better-ranked one and gives the other's room to the next fact and the passages.
# Facts written from different messages say the same thing in other words; the write keeps
# only exact repeats out (consolidation.judgement). Two facts that differ in one word of
# four ("Alice collects stamps from Spain", "... from France") are both kept. `make eval`
# (docs/eval.md), keyword-only, strict, all ten conversations, questions held at 2,000 /
# 4,000 / 8,000 characters: 1,154 / 1,295 / 1,354 without, 1,156 / 1,296 / 1,355 with.
FACT_REPEAT_SHARE = 0.65


class SearchStatus(StrEnum):
    OFF = "off"  # no index configured, or memory off
    NO_QUERY = "no_query"  # no query, or nothing searchable in it
    OK = "ok"
    TIMEOUT = "timeout"  # over MEMORY_SEARCH_TIMEOUT_MS: the block went out without passages
    FAILED = "failed"  # the index or the embedding model failed: likewise
    KEYWORDS_ONLY = "keywords_only"  # the vector leg failed; the keyword leg answered alone
    # The deployed keyword leg failed (its database paused, throttled or down): the vectors
    # answered alone.
    VECTORS_ONLY = "vectors_only"
    # The model's vectors are not EMBEDDING_DIMENSIONS long (a setting to fix): passages from
    # keywords alone on an index with a keyword leg of its own, none on S3 Vectors.
    WRONG_DIMENSIONS = "wrong_dimensions"


@dataclass
class FoundMessage:
    """A message hit, as the table holds it now."""

    passage_id: str
    channel_id: str
    message: Observation


@dataclass
class Found:
    """What search found, checked: messages to show, and facts and episodes to promote."""

    messages: list[FoundMessage] = field(default_factory=list)
    facts: list[Fact] = field(default_factory=list)
    episodes: list[Episode] = field(default_factory=list)
    dropped: int = 0  # hits whose table items are gone or changed
    vector_error: Exception | None = None  # why the vector leg did not answer, if it failed
    keyword_error: Exception | None = None  # why the keyword leg did not answer, if it failed


@dataclass
class RankedFacts:
    """Each person's facts for the block, best first: `first` fill the facts' own room;
    `if_room` (with a query, the few it is not about) take only the room the passages leave."""

    first: dict[str, list[Fact]] = field(default_factory=dict)
    if_room: dict[str, list[Fact]] = field(default_factory=dict)


@dataclass
class RankedEpisodes:
    """The channel's episodes for the block, best first: `first` fill the episodes' own
    room; `if_room` (with a query, the latest it is not about) only what the passages leave."""

    first: list[Episode] = field(default_factory=list)
    if_room: list[Episode] = field(default_factory=list)

    def within(self, most: int) -> RankedEpisodes:
        """At most `most` episodes in all, the first ones before the others."""
        first = self.first[:most]
        return RankedEpisodes(first, self.if_room[: most - len(first)])

    def all(self) -> list[Episode]:
        return [*self.first, *self.if_room]


class SearchLeg:
    """The index query and the check of its hits against the table: one unit of work with
    one time budget."""

    def __init__(
        self, index: SearchIndex, repository: MemoryRepository, settings: Settings
    ) -> None:
        self._index = index
        self._repository = repository
        self._settings = settings

    def query_for(
        self, guild_id: str | None, channel_id: str, text: str, now_ms: int
    ) -> SearchQuery:
        scope = scope_of(guild_id)
        # Direct messages share one scope for everyone: they never search beyond the channel.
        whole_scope = self._settings.search_scope == "guild" and guild_id is not None
        return SearchQuery(
            scope=scope,
            # Facts belong to the scope, not a channel (their passages have channel ""); only
            # those of the people recall shows are kept (rank_facts).
            channel_ids=None if whole_scope else [channel_id, ""],
            text=text,
            limit=search_depth(self._settings),
            now_s=epoch_seconds(now_ms),
            # The dated pass (search.rules): the query's dates as spans to search within.
            during=spans_of(date_mentions(text), now_ms) if rules.current().dated_pass else [],
        )

    def find(self, query: SearchQuery, now_ms: int) -> Found:
        answered = self._index.search(query)
        hits = list(answered)
        sources = passage_sources(self._repository, (h.passage for h in hits))
        found = checked(hits, sources, query, now_ms)
        found.vector_error = getattr(answered, "vector_error", None)
        found.keyword_error = getattr(answered, "keyword_error", None)
        return found


def query_snippet(text: str, query_tokens: set[str], limit: int = SNIPPET_CHARS) -> str:
    """A long message as the sentences that share the most words with the query, then those
    nearest them, in their order, within about `limit` characters, an ellipsis where
    sentences were left out (a search result's snippet). A short message, or no query, is
    the whole message; a sentence longer than the limit is cut at a word."""
    if len(text) <= limit or not query_tokens or not rules.current().snippets:
        return text
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    overlap = [len(query_tokens.intersection(tokens(s))) for s in sentences]
    matching = [i for i, shared in enumerate(overlap) if shared]

    def distance(i: int) -> float:
        """How far a sentence sharing no word is from one that does: the answer is often
        the sentence after the one that repeats the question's words ("I painted a lot
        this summer. Mostly sunsets.") ahead of the one before it, each ahead of the next."""
        if overlap[i] or not matching:
            return 0.0
        return min(i - j if i > j else j - i + 0.5 for j in matching)

    best_first = sorted(range(len(sentences)), key=lambda i: (-overlap[i], distance(i), i))
    chosen: list[int] = []
    used = 0
    for index in best_first:
        size = min(len(sentences[index]), limit) + 1
        if chosen and used + size > limit:
            continue
        chosen.append(index)
        used += size
    parts: list[str] = []
    previous = -1
    for index in sorted(chosen):
        if index != previous + 1:
            parts.append(ELLIPSIS)
        sentence = sentences[index]
        parts.append(sentence if len(sentence) <= limit else _cut(sentence, limit))
        previous = index
    if previous != len(sentences) - 1:
        parts.append(ELLIPSIS)
    return " ".join(parts)


def _cut(sentence: str, limit: int) -> str:
    head = sentence[:limit].rsplit(" ", 1)[0]
    return f"{head} {ELLIPSIS}"


def named_first(
    messages: list[FoundMessage], people: set[str], dates: list[DateMention], when: bool = False
) -> list[FoundMessage]:
    """The messages, with those said by someone the query names, and those said on a date
    it names (recall.dates), moved up: "what did Caroline paint?" is answered by what
    Caroline said, not by everyone who thanked her; "what did Tim say on 16 November?" by
    what was said that day; and with `when` (the query asks when: recall.dates.asks_when),
    those that place what they tell in time ("I moved to Lisbon last spring"). Fused by
    reciprocal rank with search's own order, so relevance still leads, and a message that
    is several of these leads most. `people` come from names.NameIndex: a mention, or a
    name only one member goes by, so taking someone's nickname promotes nobody's words."""
    switches = rules.current()
    people = people if switches.said_by else set()
    dates = dates if switches.said_on else []
    when = when and switches.asking_when
    by_id = {m.passage_id: m for m in messages}
    rankings = [list(by_id)]
    named = [m.passage_id for m in messages if m.message.author_id in people]
    dated = [m.passage_id for m in messages if said_on(m.message.at_ms, dates)]
    timed = [m.passage_id for m in messages if when and tells_when(m.message.content)]
    rankings += [ranking for ranking in (named, dated, timed) if ranking]
    if len(rankings) == 1:
        return messages
    order = reciprocal_rank_fusion(rankings)
    return [by_id[passage_id] for passage_id, _ in order]


def checked(
    hits: Sequence[SearchHit], sources: dict[str, list[Record]], query: SearchQuery, now_ms: int
) -> Found:
    """The hits the table still holds as indexed, in the query's scope and channels. A
    message's passage may copy the one before it too (search.passages: it is found by that
    one's words); both are read back, and it is dropped unless both are held, but only the
    message is shown: a quoted question took the room of more passages (docs/eval.md)."""
    found = Found()
    for hit in hits:
        passage = hit.passage
        records = sources.get(passage.id, [])
        in_scope = passage.scope == query.scope and (
            query.channel_ids is None
            or passage.kind == PassageKind.FACT
            or passage.channel_id in query.channel_ids
        )
        if not in_scope or not still_held(passage, records, now_ms):
            found.dropped += 1
            continue
        last = records[-1]
        if isinstance(last, Observation):
            found.messages.append(FoundMessage(passage.id, passage.channel_id, last))
        elif isinstance(last, Fact):
            found.facts.append(last)
        elif isinstance(last, Episode):
            found.episodes.append(last)
    return found


def search_status(found: Found | None, error: Exception | None = None) -> SearchStatus:
    """How a search that ran went: OK, or which leg failed (and whether for the setting)."""
    failure = error if error is not None else found.vector_error if found else None
    if isinstance(failure, EmbeddingDimensionsError):
        return SearchStatus.WRONG_DIMENSIONS
    if error is not None:
        return SearchStatus.FAILED
    if failure is None:
        return SearchStatus.VECTORS_ONLY if found and found.keyword_error else SearchStatus.OK
    return SearchStatus.KEYWORDS_ONLY


def shown_here(found: Found, visibility: Visibility) -> Found:
    """What search found that may be shown where recall is asked (botmemory.memory.visibility):
    words said here or in a channel public now, facts learned here or in one; the rest is
    counted as dropped. The index's channel filter is not enough: with the guild search
    scope it spans every channel, and a channel made private keeps its passages."""
    messages = [m for m in found.messages if visibility.shows_words_of(m.channel_id)]
    episodes = [e for e in found.episodes if visibility.shows_words_of(e.channel_id)]
    facts = visibility.facts(found.facts)
    hidden = (
        len(found.messages)
        - len(messages)
        + len(found.episodes)
        - len(episodes)
        + len(found.facts)
        - len(facts)
    )
    return Found(
        messages, facts, episodes, found.dropped + hidden, found.vector_error, found.keyword_error
    )


# Relevance-first order ---------------------------------------------------------------


def relevance(query: str, texts: Sequence[str]) -> list[float]:
    """A keyword score per text (0.0: nothing of the query in it)."""
    if not texts:
        return []
    return Bm25(texts).scores(query)


def rank_facts(
    facts: dict[str, list[Fact]],
    query: str | None,
    promoted: Iterable[Fact],
    now_ms: int,
    per_person: int,
    only_relevant: set[str],
    names: dict[str, str] | None = None,
) -> RankedFacts:
    """Each person's facts, best first: relevant to the query first (search's own finds
    count as relevant), then most used, then newest; a fact that repeats a better one in
    other words (FACT_REPEAT_SHARE) is left out. With a query, a person keeps at most
    UNRELATED_FACTS_WITH_QUERY facts that are not relevant to it, shown only in the room the
    passages leave (`if_room`); people in `only_relevant` (named in the query, not in the
    conversation) keep none. A fact's relevance never comes from its subject's own name
    ("Alice likes tea" is not about every question naming Alice)."""
    found = {f.fact_id for f in promoted}
    merged: dict[str, dict[str, Fact]] = {u: {f.fact_id: f for f in fs} for u, fs in facts.items()}
    for fact in promoted:
        if fact.user_id in merged:
            merged[fact.user_id].setdefault(fact.fact_id, fact)
    alive = {
        user: [
            f
            for f in by_id.values()
            if f.status == FactStatus.ACTIVE and ttl_alive(f.expires_at, now_ms)
        ]
        for user, by_id in merged.items()
    }
    everything = [f for fs in alive.values() for f in fs]
    scores = _scores_by_id(everything, query, names or {})
    ranked = RankedFacts()
    for user, person_facts in alive.items():

        def order(fact: Fact) -> tuple[bool, float, int, int]:
            score = scores.get(fact.fact_id, 0.0)
            return (score > 0 or fact.fact_id in found, score, fact.hits, fact.updated_ms)

        person_facts.sort(key=order, reverse=True)
        unrelated = per_person
        if query:
            unrelated = 0 if user in only_relevant else UNRELATED_FACTS_WITH_QUERY
        kept = _without_repeats(person_facts, (names or {}).get(user, ""))
        about, others = _pick(kept, lambda fact: order(fact)[0], per_person, unrelated)
        waits = query and rules.current().unrelated_wait_for_room
        ranked.first[user] = about if waits else about + others
        if waits and others:
            ranked.if_room[user] = others
    return ranked


def _pick(
    ranked: Iterator[Fact], relevant: Callable[[Fact], bool], per_person: int, unrelated: int
) -> tuple[list[Fact], list[Fact]]:
    """The relevant facts, then at most `unrelated` others, `per_person` in all: `ranked`
    puts the relevant ones first, so once the others start only their cap is left."""
    about: list[Fact] = []
    others: list[Fact] = []
    for fact in ranked:
        if len(about) + len(others) == per_person:
            break
        if relevant(fact):
            about.append(fact)
        elif len(others) < unrelated:
            others.append(fact)
        else:
            break
    return about, others


def _without_repeats(facts: list[Fact], name: str) -> Iterator[Fact]:
    """The facts, best first, less those that say again what a better one said: ones whose
    words (search's tokens, the subject's name aside) are mostly the same
    (FACT_REPEAT_SHARE of the two facts' words together). Lazy: a fact's words are read
    only when the caller asks for one more."""
    if not rules.current().fact_repeats_out:
        yield from facts
        return
    seen: list[set[str]] = []
    for fact in facts:
        words = set(tokens(_without_name(fact.text, name)))
        if any(_repeats(words, other) for other in seen):
            continue
        seen.append(words)
        yield fact


def _repeats(words: set[str], other: set[str]) -> bool:
    together = words | other
    return bool(together) and len(words & other) >= FACT_REPEAT_SHARE * len(together)


def _scores_by_id(facts: list[Fact], query: str | None, names: dict[str, str]) -> dict[str, float]:
    if not query:
        return {}
    texts = [_without_name(f.text, names.get(f.user_id, "")) for f in facts]
    return dict(zip((f.fact_id for f in facts), relevance(query, texts), strict=True))


def _without_names(text: str, names: Iterable[str]) -> str:
    for name in names:
        text = _without_name(text, name)
    return text


def _without_name(text: str, name: str) -> str:
    words = name.split()
    if not words or not rules.current().relevance_without_names:
        return text
    pattern = r"\b(?:" + "|".join(re.escape(w) for w in words) + r")(?:'s)?\b"
    return re.sub(pattern, " ", text, flags=re.IGNORECASE)


def rank_episodes(
    episodes: Sequence[Episode], query: str | None, promoted: Iterable[Episode], now_ms: int
) -> RankedEpisodes:
    """The channel's episodes: without a query, newest first as read; with one, the
    relevant ones (search's finds count), then, only in the room the passages leave, the
    newest of the others, for what is going on now. As for facts, an episode is not about
    a question for naming the people it was with."""
    by_id = {e.episode_id: e for e in episodes}
    found = set()
    for episode in promoted:
        by_id.setdefault(episode.episode_id, episode)
        found.add(episode.episode_id)
    alive = [e for e in by_id.values() if ttl_alive(e.expires_at, now_ms)]
    if not query:
        return RankedEpisodes(sorted(alive, key=lambda e: e.end_ms, reverse=True))
    scores = relevance(query, [_without_names(e.summary, e.participant_names) for e in alive])

    def relevant(episode: Episode, score: float) -> bool:
        return score > 0 or episode.episode_id in found

    ranked = sorted(zip(alive, scores, strict=True), key=lambda p: p[1], reverse=True)
    chosen = [e for e, score in ranked if relevant(e, score)]
    others = sorted(
        (e for e, score in ranked if not relevant(e, score)), key=lambda e: e.end_ms, reverse=True
    )
    unrelated = others[:UNRELATED_EPISODES_WITH_QUERY]
    if not rules.current().unrelated_wait_for_room:
        return RankedEpisodes(chosen + unrelated)
    return RankedEpisodes(chosen, unrelated)
