"""What the table keeps of deferred candidates (botmemory.consolidation.candidates): under each channel's
partition, one item per fact waiting for a later round. Part of `MemoryRepository` (see
repository.py), which callers use.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from botmemory.records import Candidate
from botmemory.storage import keys
from botmemory.storage.items import from_item, key
from botmemory.storage.table import Table

log = logging.getLogger(__name__)

# Candidates a channel keeps waiting (each costs its rounds one transaction action).
MAX_QUEUED = 12


@dataclass(frozen=True)
class CandidatesRead:
    """A channel's waiting candidates, and how many stored items were unreadable."""

    found: list[Candidate]
    unreadable: int = 0


class CandidateRepository(Table):
    def candidates(self, channel_id: str, limit: int = MAX_QUEUED) -> list[Candidate]:
        return self.read_candidates(channel_id, limit).found

    def read_candidates(self, channel_id: str, limit: int = MAX_QUEUED) -> CandidatesRead:
        """The channel's waiting candidates, oldest first: one strongly consistent Query. A
        stored item that does not read as a candidate is deleted, logged, skipped and
        counted."""
        response = self._client.query(
            TableName=self.table_name,
            KeyConditionExpression="pk = :pk AND begins_with(sk, :prefix)",
            ExpressionAttributeValues={
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":prefix": {"S": keys.CANDIDATE_PREFIX},
            },
            ConsistentRead=True,
            Limit=limit,
        )
        found: list[Candidate] = []
        unreadable = 0
        for item in response["Items"]:
            plain = from_item(item)
            try:
                found.append(Candidate.model_validate(plain))
            except ValidationError as error:
                log.warning(
                    "unreadable candidate deleted",
                    extra={"channel_id": channel_id, "error": str(error)[:300]},
                )
                self._delete_keys([key(str(plain["pk"]), str(plain["sk"]))])
                unreadable += 1
        return CandidatesRead(
            sorted(found, key=lambda c: (c.queued_ms, c.fact.fact_id)), unreadable
        )

    def has_candidates(self, channel_id: str) -> bool:
        """Whether any candidate waits in the channel (one Query of one key)."""
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeyConditionExpression": "pk = :pk AND begins_with(sk, :prefix)",
            "ExpressionAttributeValues": {
                ":pk": {"S": keys.channel_pk(channel_id)},
                ":prefix": {"S": keys.CANDIDATE_PREFIX},
            },
            "ProjectionExpression": "sk",
            "Limit": 1,
        }
        return bool(self._client.query(**request)["Items"])

    def forget_candidates_of(self, channel_id: str, user_id: str) -> int:
        """Delete the channel's candidates that hold anything of this person (their fact, or
        knowledge resting on their words); erasure calls it for each channel they spoke in."""
        doomed = [
            key(keys.channel_pk(channel_id), keys.candidate_sk(c.fact.fact_id))
            for c in self.candidates(channel_id)
            if user_id in c.people or c.fact.user_id == user_id
        ]
        return self._delete_keys(doomed) if doomed else 0
