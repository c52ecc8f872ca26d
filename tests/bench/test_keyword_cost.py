"""`make bench` table 8d: the keyword shards' writes, counted on moto's S3 while messages go
through consolidation with the deployed index, then while those rounds' writes are replayed."""

from __future__ import annotations

import sys
from pathlib import Path

import boto3
from moto import mock_aws

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))  # the bench's modules import each other by name

from keyword_cost import IndexCall, measure_keyword_writes, rekeyed, replay  # noqa: E402
from world import Lab  # noqa: E402

from botmemory.search.port import Passage, PassageKind  # noqa: E402

CHANNEL = "250000000000000000"


def _passage(passage_id: str, kind: PassageKind, channel: str) -> Passage:
    return Passage(id=passage_id, kind=kind, scope="1", channel_id=channel, text="x", time_ms=5)


class _Index:
    def __init__(self) -> None:
        self.added: list[list[str]] = []
        self.removed: list[tuple[list[str], str | None]] = []

    def add(self, passages: list[Passage]) -> int:
        self.added.append([p.id for p in passages])
        return len(passages)

    def remove(self, ids: list[str], scope: str | None = None) -> int:
        self.removed.append((list(ids), scope))
        return len(ids)


def test_a_replayed_round_writes_new_messages_and_the_same_facts_again() -> None:
    message = _passage(f"M#{CHANNEL}#7", PassageKind.MESSAGE, CHANNEL)
    fact = _passage("F#1#300#abc", PassageKind.FACT, "")

    again = rekeyed(message, copy=3, shift_ms=100)
    moved = 7 + (100 << 22) + (3 << 12)  # 100 ms later in the snowflake, copy 3
    assert (again.id, again.time_ms, again.channel_id) == (f"M#{CHANNEL}#{moved}", 105, CHANNEL)
    assert rekeyed(fact, copy=3, shift_ms=100) == fact

    index = _Index()
    calls = [IndexCall(passages=[message, fact]), IndexCall(removed=[message.id], scope="1")]
    replay(index, calls, copy=2, shift_ms=0)  # type: ignore[arg-type]
    copied = f"M#{CHANNEL}#{7 + (2 << 12)}"
    assert index.added == [[copied, fact.id]]
    assert index.removed == [([copied], "1")]


def test_the_replay_counts_the_s3_requests_of_real_rounds_and_of_their_copies() -> None:
    with mock_aws():
        lab = Lab(boto3.client("dynamodb", region_name="us-east-1"))
        try:
            # 40 messages in 2 channels: one round each (a batch of 20), then one copy.
            usage = measure_keyword_writes(lab, messages=80, real=40, channels=2, last=40)
        finally:
            lab.close()

    assert (usage.messages, usage.real, usage.last_messages) == (80, 40, 40)
    assert usage.rounds == 4
    s3, last = usage.s3, usage.last
    # Every write reads its shard first, then puts it: a GET per PUT, none lost here.
    assert s3.gets == s3.puts > 0 and s3.lost_races == 0
    # The copy writes what the real rounds wrote, into shards that now exist (304, not 404).
    assert last.puts == s3.puts / 2
    assert last.absent == 0 and last.not_modified == last.gets
    assert s3.absent == usage.shards  # each shard was new once
    assert usage.shards == 5  # two channels' messages of the month and episodes, the facts
    assert s3.uploaded > last.uploaded > 0 and s3.downloaded == 0
    assert usage.shard_bytes >= usage.largest_shard > 0
    # A channel search lists its channel's shards and asks for the facts' (all cached here).
    assert (usage.query_lists, usage.query_gets) == (1, 1)
