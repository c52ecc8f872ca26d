"""Key builders and readers: the only place that knows how items are addressed.

Everything else passes ids and records; only the repository turns them into keys,
through these functions, and reads them back with `channel_id_of` and `kind_of`.
"""

from __future__ import annotations

from enum import StrEnum

CHANNEL_PREFIX = "CH#"
SCOPE_PREFIX = "SC#"
STATE_SK = "STATE"
PROFILE_SK = "PROFILE"
OBS_PREFIX = "OBS#"
EPISODE_PREFIX = "EP#"
# Under a channel's partition: its rolling summary (one item), and the summaries it replaced,
# archived oldest first so that they stay searchable until they expire like episodes.
SUMMARY_SK = "SUMMARY"
SUMMARY_ARCHIVE_PREFIX = "SUMARC#"
FACT_PREFIX = "FACT#"
PIN_PREFIX = "PIN#"
QUARANTINE_PREFIX = "QUAR#"
# Under a channel's partition: a deferred candidate fact (botmemory.consolidation.candidates), by fact id.
CANDIDATE_PREFIX = "CAND#"
# Under a person's partition: a fact they forgot (consolidation must not bring it back),
# and a pointer to an item written by others that names them (erasure finds it by id).
FORGOTTEN_PREFIX = "FORGOT#"
NAMED_PREFIX = "NAMED#"
# Under a person's partition: one item per channel they spoke in (erasure reads the episodes
# of those channels), so that no item grows with the channels a person ever spoke in.
SPOKE_PREFIX = "SPOKE#"
# Under a person's partition: their short-term entries (botmemory.memory.short_term), one item with
# one attribute per public channel they spoke in lately (SHORT_TERM_ATTRIBUTE_PREFIX + id), so
# recall reads everyone's in one BatchGetItem.
SHORT_TERM_SK = "RECENT"
SHORT_TERM_ATTRIBUTE_PREFIX = "ch_"
# Under a scope's partition: a display name, and the members seen using it.
NAME_PREFIX = "NAME#"
# Under a scope's partition: a fact's history, one entry per change, oldest first, found by
# fact id even after the fact is gone (and only in its own scope); each entry carries the
# fact's subject as `user_id`, so their erasure finds it in the by_user index. An actor
# other than the subject (staff, the person the model answered) gets an ACTED# pointer
# there too, under their own `user_id`.
HISTORY_PREFIX = "HIST#"
ACTED_PREFIX = "ACTED#"
SWEEP_BUCKET = "SWEEP"
OPT_OUT_PK = "OPTOUT"
# Erasures in progress or just done, by keyed hash of the user id: a commit that would
# write anything of that person is refused while the marker lives.
ERASED_PK = "ERASED"
# Personas (botmemory.memory.personas): a server's personas under its scope partition, one item each.
# A persona's memories live in a scope of their own, the server's scope and the persona's
# lineage id joined by PERSONA_SCOPE_SEPARATOR: what it knows of one person (persona_user) under
# that person's id there, what it knows of no one person (persona) under PERSONA_SUBJECT. The
# rest of the key scheme (facts, tombstones, history) applies unchanged inside that scope.
PERSONA_PREFIX = "PERSONA#"
PERSONA_SCOPE_SEPARATOR = "~"
PERSONA_SUBJECT = "persona"
# Powertools Idempotency keeps its records for interactions under this partition.
IDEMPOTENCY_PK = "IDEMPOTENCY#interactions"
# A guild's channel visibility (botmemory.ingest.channels), in a partition of its own so that
# IngestFunction's role can be limited to these keys: the @everyone role's permissions,
# and one item per channel saying whether @everyone can view it.
GUILD_PREFIX = "GUILD#"
EVERYONE_SK = "EVERYONE"
CHANNEL_VISIBILITY_PREFIX = "CHAN#"
# Under a server's scope partition: the notes its staff keep for direct messages
# (botmemory.memory.notes), one item, about no member.
NOTES_SK = "NOTES"
# Under a server's scope partition: the time zone its staff chose (botmemory.when), one item.
ZONE_SK = "TIMEZONE"
# Under a server's scope partition: its search index was purged (botmemory.search.shards), so
# a write racing the purge does not create it again.
INDEX_PURGED_SK = "INDEX_PURGED"
# When the memory model last answered a round, anywhere in the deployment (one item, about
# no one): it tells a provider's outage from a batch that fails alone
# (botmemory.consolidation.attempts).
MODEL_HEALTH_PK = "MODEL"
MODEL_HEALTH_SK = "HEALTH"
# Members' and staff's controls over what is kept (botmemory.people.controls), under a guild's
# partition (IngestFunction may read it): a channel whose memory is off, the server's
# consent mode and retention (few items, read in one Query of CONTROL_PREFIX), a member who
# agreed to be recorded (opt-in mode) and a member told once that the bot keeps memory, both
# by keyed person hash. Pauses, deployment-wide, in a partition of their own by person hash
# (read once a minute, as the opt-out list is).
CONTROL_PREFIX = "CTRL#"
CHANNEL_OFF_PREFIX = "CTRL#OFF#"
CONSENT_MODE_SK = "CTRL#CONSENT"
RETENTION_SK = "CTRL#RETENTION"
CONSENTED_PREFIX = "CONSENT#"
NOTICED_PREFIX = "NOTICED#"
PAUSE_PK = "PAUSE"
# A server the bot was removed from (GUILD_DELETE without `unavailable`): the marker under
# its guild partition (when, when its purge is due, a purge's checkpoint), and a pointer in
# the PURGE partition sorted by when it is due, so the scheduled purge finds them by key.
REMOVED_SK = "CTRL#REMOVED"
PURGE_PK = "PURGE"
# The servers the deployment knows (a GUILD_CREATE seen), by guild id: a guild missing from a
# shard's READY is one the bot was removed from while the relay was down.
SERVERS_PK = "SERVERS"
# A member who left a server whose staff erase those who leave (GUILD_MEMBER_REMOVE, with the
# GUILD_MEMBERS intent): a pointer sorted by when the grace period ends, naming the guild
# and the member, so the scheduled erasure finds what is due by key; gone once handled.
DEPARTED_PK = "LEFT"
# A server's grace period for members who leave (`/memory-staff retention leavers`), days.
LEAVERS_SK = "CTRL#LEAVERS"
# A server's own days of history imported when the bot joins it (`/memory-staff backfill
# on-join`; 0: never), read with its other controls.
BACKFILL_ON_JOIN_SK = "CTRL#BACKFILL_ON_JOIN"
# When a member last started an export (`/memory export`: rate-limited), by keyed hash.
EXPORT_PK = "EXPORT"
# The relay's partition (relay/relay/store.py writes it; its keys are checked equal to these
# by tests/relay/test_gap_keys.py): a gap a shard could not receive, by when it ended and
# which shard, with the shard's guilds; catching up (botmemory.catchup) reads and claims it.
RELAY_PK = "RELAY"
RELAY_GAP_PREFIX = "GAP#"
# What was erased, kept for good so that reading the past again (catching up, a backfill)
# never brings it back: a person who ran /forgetme, by keyed person hash, with when.
LEDGER_PK = "LEDGER"
# Under a guild's partition: the server's backfill run (botmemory.catchup.backfill), one item.
BACKFILL_SK = "BACKFILL"
LEDGER_PERSON_PREFIX = "P#"
# A server whose staff shortened its retention: a pointer by guild id (when the background
# job may start, its checkpoint), so the scheduled job finds them by key
# (botmemory.people.retention_job).
RETAIN_PK = "RETAIN"


class ItemKind(StrEnum):
    """What an item is, as its sort key tells."""

    OBSERVATION = "observation"
    EPISODE = "episode"
    SUMMARY = "summary"
    SUMMARY_ARCHIVE = "summary_archive"
    FACT = "fact"
    PIN = "pin"
    PROFILE = "profile"
    QUARANTINE = "quarantine"
    FORGOTTEN = "forgotten"
    NAMED = "named"
    SPOKE = "spoke"
    SHORT_TERM = "short_term"
    NAME = "name"
    HISTORY = "history"
    ACTED = "acted"
    STATE = "state"
    EVERYONE = "everyone"
    CHANNEL_VISIBILITY = "channel_visibility"
    PERSONA = "persona"
    CANDIDATE = "candidate"
    NOTES = "notes"
    ZONE = "zone"
    OTHER = "other"


def channel_pk(channel_id: str) -> str:
    return f"{CHANNEL_PREFIX}{channel_id}"


def channel_id_of(pk: str) -> str | None:
    """The channel a channel partition key names; None for any other partition."""
    channel_id = pk.removeprefix(CHANNEL_PREFIX)
    return channel_id if channel_id != pk and channel_id else None


def scope_pk(scope: str) -> str:
    return f"{SCOPE_PREFIX}{scope}"


def user_pk(scope: str, user_id: str) -> str:
    return f"{SCOPE_PREFIX}{scope}#U#{user_id}"


def scope_of_user_pk(pk: str, user_id: str) -> str | None:
    """The scope of a person's partition key (`user_pk` read back); None for another key."""
    suffix = f"#U#{user_id}"
    if not pk.startswith(SCOPE_PREFIX) or not pk.endswith(suffix):
        return None
    return pk.removeprefix(SCOPE_PREFIX).removesuffix(suffix) or None


def kind_of(sk: str) -> ItemKind:
    if sk == STATE_SK:
        return ItemKind.STATE
    if sk == PROFILE_SK:
        return ItemKind.PROFILE
    if sk == EVERYONE_SK:
        return ItemKind.EVERYONE
    if sk == SUMMARY_SK:
        return ItemKind.SUMMARY
    if sk == SHORT_TERM_SK:
        return ItemKind.SHORT_TERM
    if sk == NOTES_SK:
        return ItemKind.NOTES
    if sk == ZONE_SK:
        return ItemKind.ZONE
    for prefix, kind in (
        (OBS_PREFIX, ItemKind.OBSERVATION),
        (EPISODE_PREFIX, ItemKind.EPISODE),
        (SUMMARY_ARCHIVE_PREFIX, ItemKind.SUMMARY_ARCHIVE),
        (FACT_PREFIX, ItemKind.FACT),
        (PIN_PREFIX, ItemKind.PIN),
        (QUARANTINE_PREFIX, ItemKind.QUARANTINE),
        (FORGOTTEN_PREFIX, ItemKind.FORGOTTEN),
        (NAMED_PREFIX, ItemKind.NAMED),
        (SPOKE_PREFIX, ItemKind.SPOKE),
        (NAME_PREFIX, ItemKind.NAME),
        (HISTORY_PREFIX, ItemKind.HISTORY),
        (ACTED_PREFIX, ItemKind.ACTED),
        (CHANNEL_VISIBILITY_PREFIX, ItemKind.CHANNEL_VISIBILITY),
        (PERSONA_PREFIX, ItemKind.PERSONA),
        (CANDIDATE_PREFIX, ItemKind.CANDIDATE),
    ):
        if sk.startswith(prefix):
            return kind
    return ItemKind.OTHER


def persona_sk(persona_id: str) -> str:
    return f"{PERSONA_PREFIX}{persona_id}"


def persona_scope(scope: str, lineage_id: str) -> str:
    """The scope a persona's memories live in, inside a server's scope."""
    return f"{scope}{PERSONA_SCOPE_SEPARATOR}{lineage_id}"


def server_scope_of(scope: str) -> str:
    """The server's scope (a guild id, or `dm`) of a scope, a persona's or not."""
    return scope.partition(PERSONA_SCOPE_SEPARATOR)[0]


def lineage_of(scope: str) -> str | None:
    """The persona lineage a scope belongs to; None for a server's own scope."""
    _, separator, lineage = scope.partition(PERSONA_SCOPE_SEPARATOR)
    return lineage if separator and lineage else None


def guild_pk(guild_id: str) -> str:
    return f"{GUILD_PREFIX}{guild_id}"


def channel_visibility_sk(channel_id: str) -> str:
    return f"{CHANNEL_VISIBILITY_PREFIX}{channel_id}"


def channel_off_sk(channel_id: str) -> str:
    return f"{CHANNEL_OFF_PREFIX}{channel_id}"


def consented_sk(user_hash: str) -> str:
    return f"{CONSENTED_PREFIX}{user_hash}"


def noticed_sk(user_hash: str) -> str:
    return f"{NOTICED_PREFIX}{user_hash}"


def purge_sk(purge_at_ms: int, guild_id: str) -> str:
    return f"{purge_at_ms:013d}#{guild_id}"


def guild_of_purge_sk(sk: str) -> str:
    return sk.partition("#")[2]


def departed_sk(due_ms: int, guild_id: str, user_id: str) -> str:
    return f"{due_ms:013d}#{guild_id}#{user_id}"


def departure_of(sk: str) -> tuple[str, str]:
    """(guild, member) a departure pointer names."""
    _, guild_id, user_id = sk.split("#", 2)
    return guild_id, user_id


def channel_named_by(sk: str) -> str | None:
    """The channel a person's SPOKE# item or a guild's visibility item is about; None for
    any other key."""
    for prefix in (SPOKE_PREFIX, CHANNEL_VISIBILITY_PREFIX):
        if sk.startswith(prefix):
            return sk.removeprefix(prefix) or None
    return None


def observation_sk(at_ms: int, kind: str, *ids: str) -> str:
    return f"{OBS_PREFIX}{at_ms:013d}#{kind}#{'#'.join(ids)}"


def observation_parts(sk: str) -> tuple[int, str, list[str]] | None:
    """An observation sort key read back: its time, its kind and its Discord ids."""
    if not sk.startswith(OBS_PREFIX):
        return None
    at_ms, _, rest = sk.removeprefix(OBS_PREFIX).partition("#")
    kind, _, ids = rest.partition("#")
    if not at_ms.isdigit() or not kind:
        return None
    return int(at_ms), kind, ids.split("#") if ids else []


def message_of(sk: str) -> str | None:
    """The message an observation is about (the first Discord id in its key)."""
    parts = observation_parts(sk)
    return parts[2][0] if parts and parts[2] else None


def episode_sk(created_ms: int, episode_id: str) -> str:
    return f"{EPISODE_PREFIX}{created_ms:013d}#{episode_id}"


def summary_archive_sk(archived_ms: int, summary_id: str) -> str:
    return f"{SUMMARY_ARCHIVE_PREFIX}{archived_ms:013d}#{summary_id}"


def fact_sk(fact_id: str) -> str:
    return f"{FACT_PREFIX}{fact_id}"


def fact_rank(updated_ms: int, fact_id: str) -> str:
    return f"{updated_ms:013d}#{fact_id}"


def forgotten_sk(fact_id: str) -> str:
    return f"{FORGOTTEN_PREFIX}{fact_id}"


def named_sk(channel_id: str, target_sk: str) -> str:
    """A pointer, under the named person's partition, to a channel's item naming them."""
    return f"{NAMED_PREFIX}{channel_id}#{target_sk}"


def ledger_person_sk(user_hash: str) -> str:
    return f"{LEDGER_PERSON_PREFIX}{user_hash}"


def spoke_sk(channel_id: str) -> str:
    """A person spoke in this channel (under their partition in the channel's scope)."""
    return f"{SPOKE_PREFIX}{channel_id}"


def short_term_attribute(channel_id: str) -> str:
    return f"{SHORT_TERM_ATTRIBUTE_PREFIX}{channel_id}"


def name_sk(normalized_name: str) -> str:
    return f"{NAME_PREFIX}{normalized_name}"


def history_prefix(fact_id: str) -> str:
    """The sort key prefix of every history entry of one fact (in its scope's partition)."""
    return f"{HISTORY_PREFIX}{fact_id}#"


def history_sk(fact_id: str, at_ms: int, entry_id: str) -> str:
    """`HIST#{fact_id}#{at_ms:013d}#{entry_id}`: a fact's changes sort oldest first."""
    return f"{history_prefix(fact_id)}{at_ms:013d}#{entry_id}"


def acted_sk(actor_id: str, target_sk: str) -> str:
    """A pointer to a history entry naming `actor_id` as who acted (scope's partition)."""
    return f"{ACTED_PREFIX}{actor_id}#{target_sk}"


def acted_target(sk: str) -> str | None:
    """The history entry's sort key an ACTED# pointer points at; None for any other key."""
    if not sk.startswith(ACTED_PREFIX):
        return None
    _actor, _, target = sk.removeprefix(ACTED_PREFIX).partition("#")
    return target if target.startswith(HISTORY_PREFIX) else None


def pin_target_prefix(target: str) -> str:
    """The sort key prefix of every pin of one target (`global` or a channel id)."""
    return f"{PIN_PREFIX}{target}#"


def pin_sk(target: str, pin_id: str) -> str:
    return f"{pin_target_prefix(target)}{pin_id}"


def quarantine_sk(quarantined_ms: int, quarantine_id: str) -> str:
    """A quarantined batch of a channel, under the channel's partition, oldest first."""
    return f"{QUARANTINE_PREFIX}{quarantined_ms:013d}#{quarantine_id}"


def candidate_sk(fact_id: str) -> str:
    """A deferred candidate of a channel, under the channel's partition: one per fact."""
    return f"{CANDIDATE_PREFIX}{fact_id}"


# Search index ids (botmemory.search): each entry is named after the table item it follows,
# so a deletion of that item tells which entry to remove.
def message_passage_id(channel_id: str, message_id: str) -> str:
    """One entry per Discord message: an edit replaces the words its creation put there."""
    return f"M#{channel_id}#{message_id}"


def fact_passage_id(scope: str, user_id: str, fact_id: str) -> str:
    return f"F#{scope}#{user_id}#{fact_id}"


def episode_passage_id(channel_id: str, episode_id: str) -> str:
    return f"E#{channel_id}#{episode_id}"


def summary_passage_id(channel_id: str, summary_id: str) -> str:
    """An archived channel summary (the live one is not indexed: recall reads it directly)."""
    return f"S#{channel_id}#{summary_id}"


# Answer rate limits (botmemory.answering.rate): a counter per channel and one per person, for
# each fixed window, under the scope's rate partition; each expires a window after its own.
RATE_PREFIX = "RATE#"
RATE_PERSON_PREFIX = "U#"


def rate_pk(scope: str) -> str:
    return f"{RATE_PREFIX}{scope}"


def channel_rate_sk(channel_id: str, window: int) -> str:
    return f"{CHANNEL_PREFIX}{channel_id}#{window}"


def person_rate_sk(person: str, window: int) -> str:
    """`person` is how the limiter names the person: their id, or a keyed hash of it."""
    return f"{RATE_PERSON_PREFIX}{person}#{window}"
