"""The consolidation commit: everything one consolidation round writes, in one transaction.

Facts, supersessions, the episode, episodes beyond the cap, consumption of the batch,
deletion of opted-out words, the profiles of the people seen, the quarantine record of a batch
that kept failing, and the release of the channel lock (with the channel's failure record)
go into one `TransactWriteItems`, so a round either happens whole or not
at all. DynamoDB takes at most `MAX_TRANSACTION_ACTIONS` actions in one transaction;
`ConsolidationCommit.room_left` is the one place that budget is counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from botmemory import keys
from botmemory.attempts import Attempts
from botmemory.items import (
    attempts_update,
    attribute,
    episode_values,
    fact_key,
    key,
    observation_key,
    profile_key,
    quarantine_values,
    state_key,
    to_item,
)
from botmemory.records import Episode, Fact, FactStatus, Observation, Quarantine

# DynamoDB refuses a transaction of more than 100 actions.
MAX_TRANSACTION_ACTIONS = 100


@dataclass(frozen=True)
class Lock:
    """A channel's consolidation lock as taken: its owner and fencing token."""

    channel_id: str
    owner: str
    fence: int
    # The channel's failed attempts as the lock found them (None: the last round went well).
    attempts: Attempts | None = None


@dataclass(frozen=True)
class LockRefused:
    """The lock was not taken: another run holds it, or the channel backs off after a
    failure until `retry_at_ms`."""

    retry_at_ms: int | None = None


class CommitRejected(Exception):
    """The transaction's conditions failed: the lock was lost or an input was already consumed."""

    def __init__(self, reasons: list[str]) -> None:
        super().__init__(", ".join(reasons) or "transaction cancelled")
        self.reasons = reasons


@dataclass
class ConsolidationCommit:
    """Everything one consolidation writes, applied atomically."""

    lock: Lock
    scope: str
    consumed: Sequence[Observation]
    now_ms: int
    facts: Sequence[Fact] = ()
    superseded: Sequence[Fact] = ()
    episode: Episode | None = None
    dropped_episodes: Sequence[str] = ()  # episode sort keys beyond the cap
    more_pending_since_ms: int | None = None  # oldest observation left pending, if any
    # People seen in the batch: (scope, user id, display name); each profile, in the scope
    # of that person's observations, learns the channel.
    people: Sequence[tuple[str, str, str]] = ()
    # Observations of people who opted out: deleted instead of consumed.
    discarded: Sequence[Observation] = ()
    # A batch that kept failing: consumed without facts, recorded here.
    quarantine: Quarantine | None = None
    # The channel's failure record after this round; None clears it.
    attempts: Attempts | None = None

    def action_count(self) -> int:
        return (
            len(self.consumed)
            + len(self.discarded)
            + len(self.people)
            + len(self.facts)
            + len(self.superseded)
            + (1 if self.episode else 0)
            + len(self.dropped_episodes)
            + (1 if self.quarantine else 0)
            + 1  # the channel state: lock release and sweep marker
        )

    def room_left(self) -> int:
        """How many more actions this commit can take and still be one transaction."""
        return MAX_TRANSACTION_ACTIONS - self.action_count()

    def actions(self, table: str) -> list[dict[str, Any]]:
        """The transaction's actions, in the shape `TransactWriteItems` takes."""
        if self.room_left() < 0:
            raise ValueError(f"commit of {self.action_count()} actions exceeds one transaction")
        channel_id = self.lock.channel_id
        actions: list[dict[str, Any]] = [{"Update": _fact_upsert(f)} for f in self.facts]
        actions += [{"Update": _supersede(f, self.now_ms)} for f in self.superseded]
        if self.episode:
            actions.append(
                {
                    "Put": {
                        "Item": to_item(episode_values(self.episode, self.scope)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        actions += [
            {"Delete": {"Key": key(keys.channel_pk(channel_id), sk)}}
            for sk in self.dropped_episodes
        ]
        if self.quarantine:
            actions.append(
                {
                    "Put": {
                        "Item": to_item(quarantine_values(self.quarantine)),
                        "ConditionExpression": "attribute_not_exists(pk)",
                    }
                }
            )
        actions += [{"Update": _consume(channel_id, o)} for o in self.consumed]
        actions += [
            {
                "Delete": {
                    "Key": observation_key(channel_id, o.sk),
                    "ConditionExpression": "attribute_exists(pending_sk)",
                }
            }
            for o in self.discarded
        ]
        actions += [
            {"Update": self._profile_seen(scope, user_id, name)}
            for scope, user_id, name in self.people
        ]
        actions.append({"Update": self._release_and_record()})
        for action in actions:
            for request in action.values():
                request["TableName"] = table
        return actions

    def _profile_seen(self, scope: str, user_id: str, name: str) -> dict[str, Any]:
        """A person's profile in a scope: names, first and last seen, and the channels they
        took part in (erasure finds their episodes through it)."""
        return {
            "Key": profile_key(scope, user_id),
            "UpdateExpression": (
                "SET user_id = :user, #scope = :scope, display_name = :name, "
                "first_seen_ms = if_not_exists(first_seen_ms, :now), last_seen_ms = :now "
                "ADD channels :channel"
            ),
            "ExpressionAttributeNames": {"#scope": "scope"},
            "ExpressionAttributeValues": {
                ":user": {"S": user_id},
                ":scope": {"S": scope},
                ":name": {"S": name},
                ":now": {"N": str(self.now_ms)},
                ":channel": {"SS": [self.lock.channel_id]},
            },
        }

    def _release_and_record(self) -> dict[str, Any]:
        """Release the lock (only while still ours), count the round, write the channel's
        failure record, and keep the channel on the sweep's list when something is still
        waiting."""
        sets, removes, values = attempts_update(self.attempts)
        values.update(
            {
                ":owner": {"S": self.lock.owner},
                ":fence": {"N": str(self.lock.fence)},
                ":now": {"N": str(self.now_ms)},
                ":one": {"N": "1"},
                ":zero": {"N": "0"},
            }
        )
        sets = [
            "last_consolidated_ms = :now",
            "consolidations = if_not_exists(consolidations, :zero) + :one",
            *sets,
        ]
        removes = ["lock_owner", "lease_until", *removes]
        if self.more_pending_since_ms is None:
            removes += ["sweep_bucket", "pending_since"]
        else:
            sets += ["sweep_bucket = :bucket", "pending_since = :since"]
            values[":bucket"] = {"S": keys.SWEEP_BUCKET}
            values[":since"] = {"N": str(self.more_pending_since_ms)}
        update = f"SET {', '.join(sets)} REMOVE {', '.join(removes)}"
        return {
            "Key": state_key(self.lock.channel_id),
            "UpdateExpression": update,
            "ConditionExpression": "lock_owner = :owner AND fence = :fence",
            "ExpressionAttributeValues": values,
        }


def _consume(channel_id: str, observation: Observation) -> dict[str, Any]:
    """Take an observation out of the pending index, only if no one else has."""
    return {
        "Key": observation_key(channel_id, observation.sk),
        "UpdateExpression": "REMOVE pending_sk",
        "ConditionExpression": "attribute_exists(pending_sk)",
    }


def _supersede(fact: Fact, now_ms: int) -> dict[str, Any]:
    """Keep a fact for staff, out of the active index."""
    return {
        "Key": fact_key(fact),
        "UpdateExpression": "SET #status = :superseded, updated_ms = :now REMOVE fact_rank",
        "ConditionExpression": "attribute_exists(pk)",
        "ExpressionAttributeNames": {"#status": "status"},
        "ExpressionAttributeValues": {
            ":superseded": {"S": FactStatus.SUPERSEDED.value},
            ":now": {"N": str(now_ms)},
        },
    }


def _fact_upsert(fact: Fact) -> dict[str, Any]:
    """Create a fact, or refresh the same fact restated: one more hit, newer timestamps."""
    values = {
        ":user": fact.user_id,
        ":scope": fact.scope,
        ":id": fact.fact_id,
        ":text": fact.text,
        ":kind": fact.kind.value,
        ":source": fact.source.value,
        ":active": FactStatus.ACTIVE.value,
        ":provenance": fact.provenance,
        ":created": fact.created_ms,
        ":updated": fact.updated_ms,
        ":rank": keys.fact_rank(fact.updated_ms, fact.fact_id),
        ":expires": fact.expires_at,
        ":zero": 0,
        ":one": 1,
    }
    return {
        "Key": fact_key(fact),
        "UpdateExpression": (
            "SET user_id = :user, #scope = :scope, fact_id = :id, item_id = :id, #text = :text, "
            "#kind = :kind, #source = if_not_exists(#source, :source), #status = :active, "
            "provenance = :provenance, created_ms = if_not_exists(created_ms, :created), "
            "updated_ms = :updated, hits = if_not_exists(hits, :zero) + :one, "
            "fact_rank = :rank, expires_at = :expires"
        ),
        "ExpressionAttributeNames": {
            "#scope": "scope",
            "#text": "text",
            "#kind": "kind",
            "#source": "source",
            "#status": "status",
        },
        "ExpressionAttributeValues": {k: attribute(v) for k, v in values.items()},
    }
