"""The bench's worlds: the counted models, `Lab` (a fresh table and search index per world on
one moto client), the gateway events and histories seeded into them, and the seeded worlds
of the recall and answer tables."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from meter import DynamoMeter

from botmemory.answering.chat.contract import ChatReply, ChatRequest
from botmemory.clock import DAY_MS, ManualClock, epoch_seconds
from botmemory.consolidation.model.contract import ConsolidationAnswer, MemoryModelError, ModelInput
from botmemory.consolidation.model.rules import RulesModel
from botmemory.memory.short_term import LINE_CHARS
from botmemory.memory.short_term import digest as short_term_digest
from botmemory.records import (
    ChannelSummary,
    Episode,
    Fact,
    FactKind,
    FactSource,
    MemoryScope,
    Observation,
    ObservationKind,
    Persona,
    Pin,
    ShortTermEntry,
    scope_of,
)
from botmemory.runtime import build_services
from botmemory.search.embeddings import Embedder
from botmemory.search.keywords import tokens
from botmemory.search.passages import message_passages
from botmemory.search.sqlite_index import SqliteSearchIndex
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.storage.items import fact_values, observation_values
from botmemory.storage.keys import episode_sk, observation_sk
from botmemory.storage.schema import create_table
from botmemory.text import clip, content_hash, short_id
from localrun import gateway as gw
from localrun.storage import put_episode, put_in_moto

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z, the clock's start in every scenario
SPEAKERS = [gw.ALICE, gw.BOB, gw.CAROL]


# MEMORY_SEARCH_TIMEOUT_MS (default 800): moto reads a big partition in Python, slowly, and
# the search's read-back would wait behind those reads past the default (see table 3c).
SEARCH_TIMEOUT_MS = 10_000


CHAT_LINES = [
    "has anyone tried the new patch yet, the loading screens feel shorter",
    "I love hiking in the Dolomites when the weather holds",
    "the raid starts at nine tonight, bring potions",
    "I use Neovim for everything, even for writing emails",
    "did the build on main go green again after the fix",
    "I work as a nurse so weekends are hit and miss",
    "lol that clip from yesterday was unreal",
    "I'm working on a small synth plugin in Rust",
]
# Table 3c: messages drawn from a small vocabulary (the chat lines' words and a few more),
# one known early message, and a question about it that shares a word with many others.
VOCABULARY = sorted(
    {word.strip(",").lower() for line in CHAT_LINES for word in line.split()}
    | {"bread", "sunday", "coffee", "garden", "train", "movie", "guitar", "market", "rain"}
)
MESSAGE_WORDS = (4, 10)  # the least and the most words in a message
EARLY_MESSAGE = 10  # the index in the history of the message the query asks about
EARLY_TEXT = "my grandmother taught me to bake sourdough bread in Lisbon every Sunday"
QUERY = "What was that about baking sourdough bread in Lisbon on a Sunday?"
INDEX_BATCH = 1000  # passages per SearchIndex.add while seeding


# The model and the world ---------------------------------------------------------------


class CountingModel:
    """The rules model, with a call counter and the last input kept for size figures."""

    name = "rules (counted)"

    def __init__(self) -> None:
        self.inner = RulesModel()
        self.calls = 0
        self.last_input: ModelInput | None = None

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        self.calls += 1
        self.last_input = batch
        return self.inner.consolidate(batch)

    def recompress(self, summary: str, target_chars: int) -> str:
        self.calls += 1  # a second call of that round: counted like any other
        return self.inner.recompress(summary, target_chars)


class FailingModel(CountingModel):
    """The counted rules model, except that every call for the given channels fails, the way
    a real model fails deterministically (a truncated answer)."""

    name = "rules (counted, failing for some channels)"

    def __init__(self, failing: set[str]) -> None:
        super().__init__()
        self.failing = failing

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        if batch.channel_id in self.failing:
            self.calls += 1
            self.last_input = batch
            raise MemoryModelError("answer truncated (simulated)")
        return super().consolidate(batch)


@dataclass
class World:
    """One fresh table and search index with their services, model and clock."""

    services: MemoryServices
    model: CountingModel
    clock: ManualClock
    index: SqliteSearchIndex


class Lab:
    """Makes worlds on one moto-backed client, each on a fresh table with a fresh embedded
    search index (SQLite FTS5 in memory), as local runs have.

    The previous world's table is dropped and its index closed first, so one of each is held
    at a time.
    """

    def __init__(self, client: Any) -> None:
        self.client = client
        self.meter = DynamoMeter(client)
        self._tables = 0
        self._index: SqliteSearchIndex | None = None

    def close(self) -> None:
        """Close the last world's index."""
        if self._index is not None:
            self._index.close()
            self._index = None

    def world(
        self, model: CountingModel | None = None, embedder: Embedder | None = None, **overrides: Any
    ) -> World:
        if self._tables:
            self.client.delete_table(TableName=f"Bench{self._tables}")
        self.close()
        self._tables += 1
        table = f"Bench{self._tables}"
        create_table(self.client, table)
        settings = Settings(
            table_name=table,
            memory_model="rules",
            bot_user_id=gw.BOT,
            consolidate_every=20,  # MEMORY_CONSOLIDATE_EVERY=20
            search_timeout_ms=SEARCH_TIMEOUT_MS,
            **overrides,
        )
        model, clock = model or CountingModel(), ManualClock(T0)
        index = self._index = SqliteSearchIndex(":memory:", embedder)
        services = build_services(
            settings, dynamodb=self.client, clock=clock, model=model, search_index=index
        )
        self.meter.take()
        return World(services, model, clock, index)


# Building events and history -----------------------------------------------------------


def event_mix(count: int, start_ms: int) -> list[dict[str, Any]]:
    """`count` gateway events cycling through all eight dispatch types (and the bot's answers)."""
    events: list[dict[str, Any]] = []
    at = start_ms
    while len(events) < count:
        events += gw.every_event_type(at)
        at += 10_000
    return events[:count]


def chat(count: int, start_ms: int) -> list[dict[str, Any]]:
    """Messages from the three speakers in turn, one second apart, some stating facts."""
    return [
        gw.message(SPEAKERS[i % 3], CHAT_LINES[i % len(CHAT_LINES)], start_ms + i * 1000)
        for i in range(count)
    ]


def chat_line(index: int) -> str:
    return CHAT_LINES[index % len(CHAT_LINES)]


def varied_lines(seed: int) -> Callable[[int], str]:
    """Texts for the messages of a history in order: MESSAGE_WORDS words from VOCABULARY
    (seeded, so every run writes the same), and EARLY_TEXT as message EARLY_MESSAGE."""
    draw = random.Random(seed)

    def line(index: int) -> str:
        if index == EARLY_MESSAGE:
            return EARLY_TEXT
        return " ".join(draw.choices(VOCABULARY, k=draw.randint(*MESSAGE_WORDS)))

    return line


def consumed_observation(index: int, at_ms: int, clock: ManualClock, text: str) -> Observation:
    """A message of the history, already consumed, expiring 30 days from the clock's now."""
    author = SPEAKERS[index % 3]
    message_id = gw.snowflake(at_ms)
    return Observation(
        channel_id=gw.CHANNEL,
        scope=gw.GUILD,
        sk=observation_sk(at_ms, ObservationKind.MESSAGE, message_id),
        kind=ObservationKind.MESSAGE,
        at_ms=at_ms,
        author_id=author,
        author_name=gw.NAMES[author],
        message_id=message_id,
        content=text,
        expires_at=epoch_seconds(clock.now_ms() + 30 * DAY_MS),
    )


def fact_item(user_id: str, index: int, count: int, clock: ManualClock) -> dict[str, Any]:
    """An active fact item as put_fact writes it, updated in the past, expiring in the future."""
    text = f"Likes board game number {index:05d}"
    updated = clock.now_ms() - (count - index) * 60_000
    fact = Fact(
        fact_id=short_id(content_hash(gw.GUILD, user_id, text)),
        scope=gw.GUILD,
        user_id=user_id,
        text=text,
        kind=list(FactKind)[index % len(FactKind)],
        source=FactSource.SELF,
        provenance=[observation_sk(updated, ObservationKind.MESSAGE, str(index))],
        created_ms=updated,
        updated_ms=updated,
        hits=1 + index % 4,
        expires_at=epoch_seconds(clock.now_ms() + 180 * DAY_MS),
        # Learned in the bench's public channel, so recall may show it there (visibility).
        learned_in=[gw.CHANNEL],
        learned_in_public=[gw.CHANNEL],
    )
    return fact_values(fact)


def seed_pins_and_episodes(world: World) -> None:
    """Two global pins, one channel pin, and the channel's episode cap (10) of episodes."""
    repository, now = world.services.repository, world.clock.now_ms()
    pins = [
        ("global", "Be kind; no spoilers outside #spoilers."),
        ("global", "Server time is UTC."),
        (gw.CHANNEL, "This channel is for the weekly raid."),
    ]
    for n, (target, text) in enumerate(pins):
        repository.put_pin(
            Pin(pin_id=f"pin{n}", scope=gw.GUILD, target=target, text=text, created_ms=now)
        )
    for n in range(world.services.settings.episodes_per_channel):
        created = now - (n + 1) * 3_600_000
        episode_id = f"ep{n:04d}"
        episode = Episode(
            channel_id=gw.CHANNEL,
            episode_id=episode_id,
            sk=episode_sk(created, episode_id),
            summary="Alice, Bob, Carol talked about the raid schedule and who brings potions. "
            "Alice: \u201cI love hiking in the Dolomites when the weather holds\u201d",
            participant_ids=SPEAKERS,
            participant_names=[gw.NAMES[s] for s in SPEAKERS],
            start_ms=created - 600_000,
            end_ms=created,
            created_ms=created,
            expires_at=epoch_seconds(now + 90 * DAY_MS),
        )
        put_episode(repository, episode, gw.GUILD)


def seed_history(
    world: World, observations: int, facts_per_user: int, text: Callable[[int], str] = chat_line
) -> list[Observation]:
    """Consumed observations before T0, one a second from the speakers in turn, active facts
    for the three speakers, pins and episodes. Returns the observations written."""
    clock = world.clock
    history = [
        consumed_observation(i, T0 - (observations - i) * 1000, clock, text(i))
        for i in range(observations)
    ]
    put_in_moto(world.services.repository, (observation_values(o, pending=False) for o in history))
    put_in_moto(
        world.services.repository,
        (
            fact_item(user, i, facts_per_user, clock)
            for user in SPEAKERS
            for i in range(facts_per_user)
        ),
    )
    seed_pins_and_episodes(world)
    world.clock.advance(seconds=1)
    return history


# The worlds of the recall tables (3a to 3e) and of table 7 -----------------------------


def recall_world(lab: Lab, observations: int, facts_per_user: int) -> World:
    world = lab.world()
    seed_history(world, observations, facts_per_user)
    return world


def indexed_world(lab: Lab, observations: int) -> tuple[World, str, tuple[float, float], int]:
    """The world of table 3a with varied messages, every one indexed as a message passage:
    the world, the early message's sort key, the seconds seeding took, and how many
    passages share a token with QUERY."""
    started = time.perf_counter()
    world = lab.world()
    history = seed_history(world, observations, 20, varied_lines(seed=observations))
    table_s = time.perf_counter() - started
    passages = message_passages(history, scope_of(gw.GUILD), gw.BOT)
    for start in range(0, len(passages), INDEX_BATCH):
        world.index.add(passages[start : start + INDEX_BATCH])
    seeding = (table_s, time.perf_counter() - started - table_s)
    wanted = set(tokens(QUERY))
    matching = sum(1 for p in passages if wanted.intersection(tokens(p.text)))
    return world, history[EARLY_MESSAGE].sk, seeding, matching


FULL_PARTICIPANTS = 8  # MEMORY_RECALL_MAX_PARTICIPANTS


def full_world(lab: Lab) -> tuple[World, list[str]]:
    """Every section over its budget: long pins, a summary at its cap, 8 people with 20 facts
    each and short-term entries in 3 other public channels, 500 indexed messages the query
    matches, the episode cap."""
    world = lab.world()
    history = seed_history(world, 500, 20, varied_lines(seed=3))
    world.index.add(message_passages(history, scope_of(gw.GUILD), gw.BOT))
    repository, now = world.services.repository, world.clock.now_ms()
    people = SPEAKERS + [f"30000000000000009{n}" for n in range(FULL_PARTICIPANTS - 3)]
    put_in_moto(
        world.services.repository,
        (fact_item(p, i, 20, world.clock) for p in people[3:] for i in range(20)),
    )
    for n in range(8):
        repository.put_pin(
            Pin(
                pin_id=f"long{n}",
                scope=gw.GUILD,
                target="global",
                text=f"Rule {n}: " + "be kind and keep spoilers in their channel; " * 3,
                created_ms=now,
            )
        )
    sentences = " ".join(
        f"In week {n} the raid team planned route {n} and who heals." for n in range(60)
    )
    summary = ChannelSummary(
        channel_id=gw.CHANNEL,
        episode_id="summary",
        sk=keys.SUMMARY_SK,
        summary=sentences[: world.services.settings.summary_max_chars],
        participant_ids=SPEAKERS,
        start_ms=T0 - DAY_MS,
        end_ms=now,
        created_ms=now,
        expires_at=epoch_seconds(now + 90 * DAY_MS),
    )
    put_episode(repository, summary, gw.GUILD)
    elsewhere: list[Observation] = []
    entries: list[ShortTermEntry] = []
    # The server's other channels are public: their words may cross into this one.
    for c in range(3):
        repository.put_channel_visibility(gw.GUILD, f"20000000000000090{c}", True)
    for p_index, person in enumerate(people):
        for c in range(3):
            channel = f"20000000000000090{c}"
            said = [
                consumed_observation(
                    p_index, now - 60_000 * (c * 2 + k + 1), world.clock, "x"
                ).model_copy(
                    update={
                        "channel_id": channel,
                        "author_id": person,
                        "author_name": f"Member {p_index}",
                        "content": f"in channel {c} I'm still fixing the deploy script, step {k}: "
                        + "checking the logs again " * 4,
                    }
                )
                for k in range(2)
            ]
            elsewhere += said
            entries.append(
                ShortTermEntry(
                    scope=gw.GUILD,
                    user_id=person,
                    channel_id=channel,
                    observation_sks=[o.sk for o in said],
                    messages=2,
                    at_ms=max(o.at_ms for o in said),
                    expires_at=epoch_seconds(now + 6 * 3_600_000),
                    # A line of the longest kind (botmemory.memory.short_term.LINE_CHARS).
                    summary=clip(
                        f"in channel {c}: still fixing the deploy script, {said[0].content}",
                        LINE_CHARS,
                    ),
                    digest=short_term_digest(said),
                )
            )
    put_in_moto(
        world.services.repository, (observation_values(o, pending=False) for o in elsewhere)
    )
    for entry in entries:
        repository.record_short_term(entry, world.services.settings.short_term_per_person)
    return world, people


PERSONA = Persona(
    persona_id="helpdesk",
    lineage_id="bench-help",
    name="Helpdesk",
    prompt="You are the helpdesk.\n{memory}",
    guild_id=gw.GUILD,
    channels=[gw.CHANNEL],
)


def persona_world(lab: Lab) -> World:
    """The world of 3b (100 observations, 20 facts per speaker) with a persona answering in
    the channel: 20 facts it keeps about each speaker and 20 of its own knowledge."""
    world = recall_world(lab, 100, 20)
    world.services.repository.put_persona(PERSONA, replaces_ms=None)
    persona_scope = keys.persona_scope(gw.GUILD, PERSONA.lineage_id)
    subjects = [*SPEAKERS, keys.PERSONA_SUBJECT]
    put_in_moto(
        world.services.repository,
        (
            fact_item(subject, i, 20, world.clock)
            | {
                "pk": keys.user_pk(persona_scope, subject),
                "scope": persona_scope,
                "lineage_id": PERSONA.lineage_id,
                "memory_scope": (
                    MemoryScope.PERSONA
                    if subject == keys.PERSONA_SUBJECT
                    else MemoryScope.PERSONA_USER
                ).value,
            }
            for subject in subjects
            for i in range(20)
        ),
    )
    return world


# Table 7's chat model and Discord ------------------------------------------------------


class TimedChatModel:
    """Answers at once and notes when it was asked, and what: the path ends at the model."""

    def __init__(self) -> None:
        self.asked_at = 0.0
        self.request: ChatRequest | None = None

    def reply(self, request: ChatRequest) -> ChatReply:
        self.asked_at = time.perf_counter()
        self.request = request
        return ChatReply(text="ok")


class SilentPoster:
    """Discord's side, left out: the path measured ends before the answer is posted."""

    def trigger_typing(self, channel_id: str) -> None:
        pass

    def create_message(self, channel_id: str, content: str, **_: Any) -> dict[str, Any]:
        return {}

    def edit_original_response(
        self, application_id: str, token: str, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        return None
