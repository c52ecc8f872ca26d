"""Issue 28's raid at full size: 10,000 messages in one channel in one minute, consumed in
order, each once, while another channel's work goes on. tests/botmemory/consolidation/
test_work_queue_bad_input.py proves the same with 1,000 through the handlers on moto's FIFO
queue; 10,000 take minutes on moto (its Query reads a whole partition per request), so the
full size is measured here, with the model that answers at once.

The observations are written straight into moto's table (what IngestFunction stores for each
message); the stream's hand-out and the worker's rounds are the production code
(WorkDispatcher.from_stream, Consolidator.consolidate with the worker's follow-ups), one
queue message at a time in FIFO order per channel, as SQS FIFO delivers them.
"""

from __future__ import annotations

import time
from typing import Any

from tables import print_table
from world import T0, Lab

from botmemory.consolidation.work import (
    WorkDispatcher,
    WorkMessage,
    WorkQueue,
    register_local_queue,
    work_of,
)
from botmemory.storage import keys
from botmemory.storage.items import observation_values
from botmemory.storage.repository import MemoryRepository
from botmemory.storage.schema import PENDING_INDEX
from localrun import gateway as gw
from localrun.storage import put_in_moto

RAID = 10_000
RAID_CHANNEL, OTHER = "230000000000000001", "230000000000000002"
RAID_QUEUE = "bench-raid-queue"
OTHER_LINES = 20
TIMEOUT_MS = 300_000  # the worker's Timeout


def bench_raid(lab: Lab) -> None:
    world = lab.world(max_batch=60)
    services, clock = world.services, world.clock
    step = 60_000 // RAID
    lines = [(RAID_CHANNEL, f"raid line {n}", T0 + n * step) for n in range(RAID)]
    # The other channel: one full batch (MEMORY_CONSOLIDATE_EVERY, 20), said meanwhile.
    lines += [(OTHER, f"other line {n}", T0 + 1_000 * (n + 1)) for n in range(OTHER_LINES)]
    put_in_moto(
        world.services.repository,
        (
            observation_values(services.recorder.parse(gw.message(gw.ALICE, t, at, channel=c)))
            for c, t, at in lines
        ),
    )
    clock.set(T0 + 61_000)
    repository = services.repository
    every = _pending(repository, RAID_CHANNEL)

    sent: list[WorkMessage] = []
    register_local_queue(RAID_QUEUE, lambda body, _group: sent.append(work_of(body)))
    dispatcher = WorkDispatcher(WorkQueue(RAID_QUEUE, clock), repository, clock)
    started = time.perf_counter()
    dispatcher.from_stream([RAID_CHANNEL] * RAID + [OTHER] * OTHER_LINES)
    queue, sent[:] = list(sent), []
    invocations = rounds = consumed = 0
    in_order = True
    other_waited = None
    while queue:
        work = queue.pop(0)
        invocations += 1
        outcomes = services.consolidator.consolidate(
            work.channel_id, force=work.force, time_left_ms=lambda: TIMEOUT_MS
        )
        rounds += len(outcomes)
        consumed += sum(o.consumed for o in outcomes)
        if outcomes and outcomes[-1].again:
            dispatcher.again(work, force=work.force or outcomes[-1].splitting)
        queue += sent
        sent.clear()
        if work.channel_id == OTHER:
            other_waited = invocations - 1  # raid invocations before it
        else:
            left = _pending(repository, RAID_CHANNEL)
            in_order = in_order and left == every[len(every) - len(left) :]
    seconds = time.perf_counter() - started
    print_table(
        "9d. A raid: 10,000 messages in one channel in one minute (issue 28, bad input)",
        ["figure", "value"],
        [
            ("messages consumed (each once)", f"{consumed:,} of {RAID + OTHER_LINES:,}"),
            ("consumed oldest first after every invocation", "yes" if in_order else "NO"),
            ("left pending in the raid's channel", len(_pending(repository, RAID_CHANNEL))),
            ("worker invocations / rounds", f"{invocations} / {rounds}"),
            ("raid invocations before the other channel's", other_waited),
            ("seconds on moto (the model answers at once)", round(seconds, 1)),
        ],
        [
            "A batch of 60 (MEMORY_MAX_BATCH=60). On SQS FIFO the other channel is its own",
            "message group, so it never waits for the raid's; here the queue is one list in",
            "arrival order, and the other channel's message comes right after the raid's first.",
        ],
    )


def _pending(repository: MemoryRepository, channel: str) -> list[str]:
    """The sort keys of the channel's observations still pending, oldest first (every page)."""
    found: list[str] = []
    query: dict[str, Any] = {
        "TableName": repository.table_name,
        "IndexName": PENDING_INDEX,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": keys.channel_pk(channel)}},
        "ProjectionExpression": "sk",
    }
    while True:
        answer = repository.client.query(**query)
        found += [item["sk"]["S"] for item in answer["Items"]]
        if "LastEvaluatedKey" not in answer:
            return found
        query["ExclusiveStartKey"] = answer["LastEvaluatedKey"]
