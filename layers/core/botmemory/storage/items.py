"""How records become DynamoDB items and back: attribute values, and each record's keys.

The repository and the consolidation commit both write items; they shape them here, so
an item written one way is read back the same way everywhere.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

from botmemory.records import (
    Attempts,
    Candidate,
    Episode,
    Fact,
    FactHistory,
    FactStatus,
    Forgotten,
    HistoryActed,
    MemoryScope,
    Named,
    Observation,
    Pin,
    Quarantine,
    ShortTermEntry,
)
from botmemory.storage import keys

_serializer = TypeSerializer()
_deserializer = TypeDeserializer()


def attribute(value: Any) -> dict[str, Any]:
    """One value as a DynamoDB attribute value."""
    return dict(_serializer.serialize(value))


def to_item(values: dict[str, Any]) -> dict[str, Any]:
    """Plain values as an item; None and empty lists are left out (DynamoDB refuses empty sets)."""
    return {k: attribute(v) for k, v in values.items() if v is not None and v != []}


def _plain(value: Any) -> Any:
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, set):
        return sorted(_plain(v) for v in value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def from_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item as plain values: whole numbers as int, sets as sorted lists."""
    return {k: _plain(_deserializer.deserialize(v)) for k, v in item.items()}


def key(pk: str, sk: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"S": sk}}


def observation_key(channel_id: str, sk: str) -> dict[str, Any]:
    return key(keys.channel_pk(channel_id), sk)


def state_key(channel_id: str) -> dict[str, Any]:
    return key(keys.channel_pk(channel_id), keys.STATE_SK)


def fact_key(fact: Fact) -> dict[str, Any]:
    return key(keys.user_pk(fact.scope, fact.user_id), keys.fact_sk(fact.fact_id))


def episode_key(episode: Episode) -> dict[str, Any]:
    return key(keys.channel_pk(episode.channel_id), episode.sk)


def pin_key(pin: Pin) -> dict[str, Any]:
    return key(keys.scope_pk(pin.scope), keys.pin_sk(pin.target, pin.pin_id))


def profile_key(scope: str, user_id: str) -> dict[str, Any]:
    return key(keys.user_pk(scope, user_id), keys.PROFILE_SK)


def forgotten_key(scope: str, user_id: str, fact_id: str) -> dict[str, Any]:
    return key(keys.user_pk(scope, user_id), keys.forgotten_sk(fact_id))


def named_key(named: Named) -> dict[str, Any]:
    return key(
        keys.user_pk(named.scope, named.user_id), keys.named_sk(named.channel_id, named.target_sk)
    )


def name_key(scope: str, normalized_name: str) -> dict[str, Any]:
    return key(keys.scope_pk(scope), keys.name_sk(normalized_name))


def history_target_sk(entry: FactHistory) -> str:
    return keys.history_sk(entry.fact_id, entry.at_ms, entry.entry_id)


def history_values(entry: FactHistory) -> dict[str, Any]:
    """A history entry as stored, under its scope; `user_id` (the fact's subject) puts it in
    the by_user index, so the subject's erasure finds it."""
    values = entry.model_dump(mode="json")
    values.update(pk=keys.scope_pk(entry.scope), sk=history_target_sk(entry))
    return values


def acted_values(acted: HistoryActed) -> dict[str, Any]:
    """An actor's pointer as stored; `user_id` (the actor) puts it in the by_user index."""
    values = acted.model_dump(mode="json")
    values.update(
        pk=keys.scope_pk(acted.scope),
        sk=keys.acted_sk(acted.actor_id, acted.target_sk),
        user_id=acted.actor_id,
    )
    return values


def history_puts(entry: FactHistory) -> list[dict[str, Any]]:
    """The Put actions (without TableName) that record one change: the entry, and a pointer
    under its actor when someone other than the subject acted. Idempotent: the same change
    written twice is the same items."""
    puts = [{"Put": {"Item": to_item(history_values(entry))}}]
    if entry.actor_id and entry.actor_id != entry.user_id:
        acted = HistoryActed(
            scope=entry.scope,
            actor_id=entry.actor_id,
            target_sk=history_target_sk(entry),
            expires_at=entry.expires_at,
        )
        puts.append({"Put": {"Item": to_item(acted_values(acted))}})
    return puts


def forgotten_values(forgotten: Forgotten) -> dict[str, Any]:
    """A forget tombstone as stored; `user_id` puts it in the by_user index (erasure)."""
    values = forgotten.model_dump(mode="json")
    values.update(
        pk=keys.user_pk(forgotten.scope, forgotten.user_id),
        sk=keys.forgotten_sk(forgotten.fact_id),
    )
    return values


def named_values(named: Named) -> dict[str, Any]:
    """A named pointer as stored; `user_id` (the person named) puts it in the by_user index."""
    values = named.model_dump(mode="json")
    values.update(
        pk=keys.user_pk(named.scope, named.user_id),
        sk=keys.named_sk(named.channel_id, named.target_sk),
    )
    return values


def short_term_entries_of(item: dict[str, Any]) -> list[ShortTermEntry]:
    """A person's short-term item (plain values) as its entries, newest first."""
    entries = [
        ShortTermEntry.model_validate(
            {
                **value,
                "scope": item["scope"],
                "user_id": item["user_id"],
                "channel_id": name[len(keys.SHORT_TERM_ATTRIBUTE_PREFIX) :],
            }
        )
        for name, value in item.items()
        if name.startswith(keys.SHORT_TERM_ATTRIBUTE_PREFIX) and isinstance(value, dict)
    ]
    return sorted(entries, key=lambda e: e.at_ms, reverse=True)


def observation_values(observation: Observation, *, pending: bool = True) -> dict[str, Any]:
    """An observation as stored: waiting in the pending index unless told otherwise, and in
    the by_user index under its author."""
    values = observation.model_dump(mode="json")
    values.update(
        pk=keys.channel_pk(observation.channel_id),
        sk=observation.sk,
        user_id=observation.author_id,
    )
    if pending:
        values["pending_sk"] = observation.sk
    return values


# The Fact fields stored as string sets (botmemory.memory.visibility).
FACT_CHANNEL_SETS = ("learned_in", "learned_in_public")


def fact_values(fact: Fact) -> dict[str, Any]:
    """A fact as stored; only an active fact is in the active_facts index."""
    values = fact.model_dump(mode="json")
    values.update(
        pk=keys.user_pk(fact.scope, fact.user_id),
        sk=keys.fact_sk(fact.fact_id),
        item_id=fact.fact_id,
    )
    if fact.status == FactStatus.ACTIVE:
        values["fact_rank"] = keys.fact_rank(fact.updated_ms, fact.fact_id)
    # String sets, so that a restatement elsewhere adds its channel (ADD) to the same item.
    for name in FACT_CHANNEL_SETS:
        values[name] = set(values[name]) or None
    if not fact.manually_written:  # absent means no: every other fact's item stays as it was
        del values["manually_written"]
    return values


def pin_values(pin: Pin) -> dict[str, Any]:
    """A pin as stored; `user_id` puts it in the by_user index, so erasure finds the pins
    made in a person's name."""
    values = pin.model_dump(mode="json")
    values.update(
        pk=keys.scope_pk(pin.scope),
        sk=keys.pin_sk(pin.target, pin.pin_id),
        item_id=pin.pin_id,
        user_id=pin.author_id,
    )
    return values


def episode_values(episode: Episode, scope: str) -> dict[str, Any]:
    values = episode.model_dump(mode="json")
    values.update(pk=keys.channel_pk(episode.channel_id), sk=episode.sk, scope=scope)
    return values


def quarantine_values(quarantine: Quarantine) -> dict[str, Any]:
    """A quarantine record as stored, under its channel; `user_id` (when one person wrote what
    it holds) puts it in the by_user index, so erasure finds it."""
    values = quarantine.model_dump(mode="json")
    values.update(
        pk=keys.channel_pk(quarantine.channel_id),
        sk=keys.quarantine_sk(quarantine.quarantined_ms, quarantine.quarantine_id),
    )
    if len(quarantine.user_ids) == 1:
        values["user_id"] = quarantine.user_ids[0]
    return values


def candidate_key(candidate: Candidate) -> dict[str, Any]:
    return key(keys.channel_pk(candidate.channel_id), keys.candidate_sk(candidate.fact.fact_id))


def candidate_values(candidate: Candidate) -> dict[str, Any]:
    """A candidate as stored, under its channel; `user_id` (its subject, when a person) puts
    it in the by_user index, so the subject's erasure finds it."""
    values = candidate.model_dump(mode="json")
    values.update(
        pk=keys.channel_pk(candidate.channel_id), sk=keys.candidate_sk(candidate.fact.fact_id)
    )
    if candidate.fact.memory_scope != MemoryScope.PERSONA:
        values["user_id"] = candidate.fact.user_id
    return values


# A channel's failed attempts live on its STATE item under these attribute names.
_ATTEMPT_ATTRIBUTES = {
    "failures": "retry_failures",
    "error": "retry_error",
    "head": "retry_head",
    "count": "retry_attempts",
    "retry_at_ms": "retry_at",
    "split_size": "retry_split_size",
    "split_until": "retry_split_until",
    "failing_since_ms": "retry_failing_since",
}


def attempts_of(state: dict[str, Any]) -> Attempts | None:
    """The failure record on a STATE item (plain values), or None when it has none."""
    found = {field: state[name] for field, name in _ATTEMPT_ATTRIBUTES.items() if name in state}
    if "failures" not in found:
        return None
    return Attempts(**found)


def attempts_update(attempts: Attempts | None) -> tuple[list[str], list[str], dict[str, Any]]:
    """How an UpdateItem on the STATE item writes a failure record: SET clauses, attributes to
    REMOVE, and the expression values. None removes the record."""
    sets: list[str] = []
    removes: list[str] = []
    values: dict[str, Any] = {}
    for field, name in _ATTEMPT_ATTRIBUTES.items():
        value = getattr(attempts, field) if attempts is not None else None
        if value is None or value == "":
            removes.append(name)
        else:
            sets.append(f"{name} = :{name}")
            values[f":{name}"] = attribute(value)
    return sets, removes, values
