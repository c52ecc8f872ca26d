"""The things memory is made of, as stored and as returned to callers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, ConfigDict


class ObservationKind(StrEnum):
    MESSAGE = "msg"
    ANSWER = "answer"  # the bot's own reply
    EDIT = "edit"
    DELETE = "del"
    BULK_DELETE = "delbulk"
    REACTION_ADD = "react"
    REACTION_REMOVE = "unreact"
    REACTION_CLEAR = "unreactall"
    REACTION_CLEAR_EMOJI = "unreactemoji"


class FactKind(StrEnum):
    FACT = "fact"
    PREFERENCE = "preference"
    PROJECT = "project"
    CONSTRAINT = "constraint"
    PERSON = "person"
    TOOL = "tool"
    WORKFLOW = "workflow"


class MemoryScope(StrEnum):
    """Whose memory a fact is (botmemory.memory.personas)."""

    USER = "user"  # what a person said of themselves: every persona of the server sees it
    PERSONA = "persona"  # what a persona learned that is no one's: shared by all its users
    PERSONA_USER = "persona_user"  # what a persona knows of one person in its role: its own


class FactSource(StrEnum):
    SELF = "self"  # from the person's own words, by consolidation
    MANUAL = "manual"  # the person's `/memory remember`
    OPERATOR = "operator"  # staff
    # Corrected by the chat model with its `update_memory` tool (botmemory.answering.corrections): the
    # fact keeps its id and its evidence, its text is the model's, announced in the channel.
    MODEL = "model"


class FactStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    # Out of the hot tier (botmemory.memory.hot_tier): kept and listed, never recalled, until staff
    # restore it or consolidation hears it again.
    DEMOTED = "demoted"


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class Observation(Record):
    channel_id: str
    scope: str
    sk: str
    kind: ObservationKind
    at_ms: int
    author_id: str | None = None
    author_name: str | None = None
    author_is_bot: bool = False
    message_id: str | None = None
    content: str = ""
    reply_to: str | None = None
    emoji: str | None = None
    message_ids: list[str] = []
    expires_at: int | None = None
    # Once consolidated: the search passages that copy its words (botmemory.search.passages).
    passages: list[str] = []
    # The ingest invocation that stored it (its request id): consolidation logs the ids it
    # consumed, so one message can be followed from the relay's batch to its facts.
    ingest_id: str | None = None
    # The author's roles in the guild, as the message said (member.roles): whether the
    # author is staff (GuildStaff) is decided from them when it matters.
    author_roles: list[str] = []
    # Every name the author goes by, as the event said (server nickname, global name,
    # account name): each names them, in the name registry and wherever a name is looked for.
    author_names: list[str] = []


class Fact(Record):
    fact_id: str
    scope: str
    user_id: str
    text: str
    kind: FactKind
    source: FactSource
    status: FactStatus = FactStatus.ACTIVE
    provenance: list[str] = []
    created_ms: int
    updated_ms: int
    hits: int = 1  # consolidation stated it this many times
    expires_at: int | None = None
    # How often an answer's memory block showed it, and when last (botmemory.memory.hot_tier: the
    # answer path records them after its reply is posted). Items without them read 0 / None.
    recall_hits: int = 0
    last_recall_ms: int | None = None
    # Persona memories (botmemory.memory.personas): `scope` is then the persona's scope inside the
    # server's (keys.persona_scope), `lineage_id` the persona's; for a persona's own knowledge
    # `user_id` is keys.PERSONA_SUBJECT and `evidence_user_ids` the people it was learned from.
    memory_scope: MemoryScope = MemoryScope.USER
    lineage_id: str | None = None
    evidence_user_ids: list[str] = []
    # Where it may be shown (botmemory.memory.visibility): the channels its evidence was said in,
    # and those of them that were public then. Stored as string sets, added to by each
    # restatement; empty for a fact stored before facts kept their channels.
    learned_in: list[str] = []
    learned_in_public: list[str] = []
    # Written by a person (`/memory remember`) and since corrected by the chat model: its
    # source says `model`, but the hot tier still keeps it (botmemory.memory.hot_tier.protected).
    # Stored only when true.
    manually_written: bool = False
    # When it was first and last said (epoch ms of its evidence: never part of its text, so a
    # restatement on another day is the same fact), and the end of the last day it holds,
    # when its evidence said (botmemory.when.facts). A fact stored before them reads its
    # times from its evidence, else from when it was written; None: not said.
    first_said_ms: int | None = None
    last_said_ms: int | None = None
    valid_until_ms: int | None = None


class HistoryActor(StrEnum):
    """Who changed a fact."""

    CONSOLIDATION = "consolidation"  # the memory model's batch, judged by consolidation
    MEMBER = "member"  # the fact's subject: `/memory remember`, `/memory forget`
    STAFF = "staff"  # `/memory-staff forget-fact`, `/memory-staff restore-fact`
    MODEL = "model"  # the chat model's `update_memory` (botmemory.answering.corrections)


class FactChange(StrEnum):
    """What a change did to a fact."""

    CREATED = "created"  # old is None
    UPDATED = "updated"  # new text
    # Active again: a superseded or demoted fact stated again, or a demoted one staff restored.
    RESTORED = "restored"
    SUPERSEDED = "superseded"  # kept for staff, out of recall; `new` is the newer fact's text
    DEMOTED = (
        "demoted"  # out of the hot tier (botmemory.memory.hot_tier): kept, listed, not recalled
    )
    DELETED = "deleted"  # new is None


class FactHistory(Record):
    """One change to a fact: stored under the scope's partition, findable by fact id even
    after the fact is gone, and in the by_user index under the fact's subject (`user_id`),
    so the subject's erasure removes it. It holds texts: personal data, retained like the
    fact (`expires_at` = when it happened + the fact retention)."""

    scope: str
    user_id: str  # the fact's subject
    fact_id: str
    entry_id: str  # unique among the fact's changes at one time
    change: FactChange
    old: str | None = None
    new: str | None = None
    actor: HistoryActor
    # Who acted, when someone did: staff, or the person whose conversation led the model to
    # correct it. An actor other than the subject gets a pointer (`HistoryActed`) so their
    # own erasure takes their id out of the entry.
    actor_id: str | None = None
    superseded_by: str | None = None  # the newer fact's id, for a supersession
    at_ms: int
    expires_at: int | None = None


class HistoryActed(Record):
    """A pointer, under the acting person's id, to a history entry of someone else's fact
    that names them as its actor: erasure finds it in the by_user index and clears the id."""

    scope: str
    actor_id: str
    target_sk: str  # the history entry's sort key, in the scope's partition
    expires_at: int | None = None


class Episode(Record):
    channel_id: str
    episode_id: str
    sk: str
    summary: str
    participant_ids: list[str] = []
    participant_names: list[str] = []
    start_ms: int
    end_ms: int
    created_ms: int
    expires_at: int | None = None


class ChannelSummary(Episode):
    """A channel's rolling summary of its whole conversation (`sk` SUMMARY), rewritten by
    each consolidation round in the same model call, or one it replaced (`sk` SUMARC#...),
    archived so that it stays searchable until it expires like episodes. Shaped as an
    episode, so erasure, search and recall treat both alike: `start_ms`..`end_ms` is the
    stretch of conversation it covers, `participant_ids` who spoke in it (the newest
    MAX_SUMMARY_PARTICIPANTS; `more_participants` when some were dropped)."""

    more_participants: bool = False


class ShortTermEntry(Record):
    """What a person did lately in one of the server's public channels (botmemory.memory.short_term):
    one line saying it, and pointers to the messages it was made from (oldest first) with a
    digest of their words, read back at recall so that the line is shown only while they
    are all still held unchanged. One per person and channel, rewritten by each round there
    and by each answer to them there; it expires after MEMORY_SHORT_TERM_HOURS."""

    scope: str
    user_id: str
    channel_id: str
    observation_sks: list[str]
    messages: int  # how many messages of theirs it was made from
    at_ms: int  # its newest message
    expires_at: int | None = None
    # The line (an entry stored before entries had one has "": never shown), and the digest
    # of its messages' words (botmemory.memory.short_term.digest).
    summary: str = ""
    digest: str = ""


class GuildStaff(Record):
    """Who a guild's staff are, as its last GUILD_CREATE said (botmemory.ingest.channels): its
    owner, and the roles with Administrator or Manage Server."""

    owner_id: str | None = None
    role_ids: list[str] = []

    def includes(self, user_id: str | None, roles: Iterable[str]) -> bool:
        return bool(user_id) and (
            user_id == self.owner_id or not set(roles).isdisjoint(self.role_ids)
        )


class Persona(Record):
    """A character the bot answers as: its prompt (with `{memory}`), where it answers (the
    listed channels, or the whole server when none are listed), and a lineage id that stays
    the same through renames and prompt edits, which its memories are kept under. Defined by
    a server's staff (`guild_id` set) or for the whole deployment (`guild_id` None)."""

    persona_id: str
    lineage_id: str
    name: str
    prompt: str
    guild_id: str | None = None
    channels: list[str] = []
    created_ms: int = 0
    updated_ms: int = 0
    removed_ms: int | None = None  # removed: answers nowhere; its memories stay until purged

    @property
    def active(self) -> bool:
        return self.removed_ms is None


class Pin(Record):
    pin_id: str
    scope: str
    target: str  # "global" or a channel id
    text: str
    author_id: str | None = None
    created_ms: int
    expires_at: int | None = None


class Profile(Record):
    """A person as seen in one scope: the name they go by and the channels they spoke in."""

    scope: str
    user_id: str
    display_name: str = ""
    channels: list[str] = []
    first_seen_ms: int | None = None
    last_seen_ms: int | None = None


class Named(Record):
    """A pointer, under a person's partition, to an item of a channel written by others that
    names them (an observation, an episode): erasure finds it by id, without a scan."""

    scope: str
    user_id: str  # the person named
    channel_id: str
    target_sk: str
    expires_at: int | None = None  # the target's


class Forgotten(Record):
    """A fact its subject (or staff) forgot: consolidation must not bring it back from
    words said before `forgotten_ms`."""

    scope: str
    user_id: str
    fact_id: str
    forgotten_ms: int
    expires_at: int | None = None


class Quarantine(Record):
    """A batch that kept failing, even alone: consumed without facts, kept for staff to see.

    It holds the keys of the observations it consumed (their words stay in the observations
    until those expire), never their text; the error is the model's last failure, clipped.
    """

    channel_id: str
    quarantine_id: str
    scope: str
    observation_sks: list[str]
    user_ids: list[str] = []  # authors of those observations
    error: str
    attempts: int  # failed attempts in a row when it was quarantined
    quarantined_ms: int
    expires_at: int | None = None


class FactPriority(StrEnum):
    """How much a proposed fact matters, highest first: within a person's cap on new facts
    per round, a higher priority is kept first (botmemory.consolidation.candidates)."""

    SAFETY = "safety"  # health and safety: an allergy, a medical need, a danger
    IDENTITY = "identity"  # who they are: name, pronouns, home, work, family
    COMMITMENT = "commitment"  # what they promised, plan or are working on
    TASTE = "taste"  # preferences and everything else

    @property
    def rank(self) -> int:
        return list(FactPriority).index(self)


class Candidate(Record):
    """A fact a round judged sound but could not keep yet (beyond its subject's cap on new
    facts, or its transaction's room): kept under the channel, considered first by the
    channel's next rounds (botmemory.consolidation.candidates). It holds a person's fact: `fact.user_id`
    (a person's, for user and persona_user facts) puts it in the by_user index, and erasure
    also finds it by `fact.evidence_user_ids` in the channels the person spoke in."""

    channel_id: str
    server_scope: str  # the server's scope (a guild id, or `dm`)
    fact: Fact
    priority: FactPriority = FactPriority.TASTE
    subject_name: str | None = None
    queued_ms: int
    rounds: int = 0  # rounds it has waited since it was proposed
    expires_at: int | None = None

    @property
    def people(self) -> list[str]:
        """Whose words and facts it holds: its subject (unless the persona) and its teachers."""
        subject = [] if self.fact.memory_scope == MemoryScope.PERSONA else [self.fact.user_id]
        return list(dict.fromkeys(subject + list(self.fact.evidence_user_ids)))


@dataclass(frozen=True)
class Attempts:
    """A channel's record of failed consolidation attempts, as kept on its STATE item."""

    failures: int  # failures since the channel last consolidated normally (drives the back-off)
    error: str = ""  # the last failure, clipped
    head: str | None = None  # sort key of the oldest observation of the batch that failed
    count: int = 0  # failed attempts of batches starting at `head`
    retry_at_ms: int | None = None  # no round before this time
    split_size: int | None = None  # batch size while a failing batch is being split
    split_until: str | None = None  # sort key of the last observation of the range that fails
    # Since when the channel's rounds fail (the first failure of this streak): a provider
    # that answered no round since says nothing of the batch (an outage).
    failing_since_ms: int | None = None

    @property
    def splitting(self) -> bool:
        return self.split_size is not None


def scope_of(guild_id: str | None) -> str:
    """Facts and pins live per guild; direct messages share the `dm` scope."""
    return guild_id if guild_id else "dm"
