"""Table 4x: `/memory export` of a member with 100,000 recorded messages: the DynamoDB
requests, the parts and their bytes, and the AnswerFunction invocations it takes
(botmemory.people.export, botmemory.answering.exports).

Measured on 10,000 messages, and projected to 100,000: moto answers a page of the by_user
index by sorting every item the index holds, so 1,000 pages of a 100,000-item index take
longer than the whole bench (the export's own work is a page at a time: two requests per 100
records, parts closed at 1 MB, so requests, parts and bytes grow with the records, and the
invocations with the time they take, simulated below).

The member's messages are seeded straight into moto (`put_in_moto`) across ten channels, with
their SPOKE# items, a profile and a fact; each channel holds ten episodes that include them.
The export runs as AnswerFunction runs it: parts until its time runs short (its 90 s timeout,
the exporter's 15 s reserve), then the cursor is kept and the next invocation goes on. Time
is simulated, not measured: each DynamoDB request counts `REQUEST_MS`, each part's upload to
Discord `UPLOAD_MS_PER_MB` a megabyte (the DM's file), so the invocation count does not
depend on this machine.
"""

from __future__ import annotations

import math
from typing import Any

from tables import print_table
from world import Lab

from botmemory.people.export import RESERVE_MS, ExportCursor, Exporter
from botmemory.records import Episode, Observation, ObservationKind
from botmemory.storage import keys
from botmemory.storage.items import episode_values, observation_values
from botmemory.storage.keys import observation_sk
from localrun import gateway as gw
from localrun.storage import put_in_moto

MESSAGES = 10_000  # measured
PROJECTED = 100_000
CHANNELS = 10
EPISODES_PER_CHANNEL = 10
MEMBER = "300000000000000042"
TIMEOUT_MS = 90_000  # AnswerFunction's Timeout in template.yaml
REQUEST_MS = 10  # a DynamoDB request in the region, answered
UPLOAD_MS_PER_MB = 2_000  # a DM with a file attached, per megabyte


def _seed(lab: Lab) -> Any:
    world = lab.world()
    repository, now = world.services.repository, world.clock.now_ms()
    channels = [str(200000000000000600 + c) for c in range(CHANNELS)]

    def messages() -> Any:
        for n in range(MESSAGES):
            at = now - (MESSAGES - n) * 1_000
            yield observation_values(
                Observation(
                    channel_id=channels[n % CHANNELS],
                    scope=gw.GUILD,
                    sk=observation_sk(at, ObservationKind.MESSAGE, gw.snowflake(at)),
                    kind=ObservationKind.MESSAGE,
                    at_ms=at,
                    author_id=MEMBER,
                    author_name="Zephyrine",
                    message_id=gw.snowflake(at),
                    content=f"message {n}: the hives did well this week, honey by friday",
                ),
                pending=False,
            )

    put_in_moto(repository, messages())  # 10,000: seconds
    put_in_moto(
        repository,
        [
            {
                "pk": keys.user_pk(gw.GUILD, MEMBER),
                "sk": f"{keys.SPOKE_PREFIX}{channel}",
                "user_id": MEMBER,
                "scope": gw.GUILD,
            }
            for channel in channels
        ],
    )
    put_in_moto(
        repository,
        [
            episode_values(
                Episode(
                    channel_id=channel,
                    episode_id=f"e{c}{e}",
                    sk=keys.episode_sk(now - e * 60_000, f"e{c}{e}"),
                    summary=f"Zephyrine and <@{gw.BOB}> talked about bees ({e})",
                    participant_ids=[MEMBER, gw.BOB],
                    participant_names=["Zephyrine", "Bob"],
                    start_ms=now - e * 60_000 - 1_000,
                    end_ms=now - e * 60_000,
                    created_ms=now - e * 60_000,
                ),
                gw.GUILD,
            )
            for c, channel in enumerate(channels)
            for e in range(EPISODES_PER_CHANNEL)
        ],
    )
    lab.meter.take()
    return repository


def bench_export(lab: Lab) -> None:
    repository = _seed(lab)
    exporter = Exporter(repository, MEMBER, settings=lambda scopes: {"servers": scopes})
    cursor = ExportCursor()
    requests = invocations = 0
    parts: list[int] = []
    while not cursor.finished:
        invocations += 1
        spent = {"ms": 0}

        def left(spent: dict[str, int] = spent) -> int:
            return TIMEOUT_MS - spent["ms"] - len(lab.meter.peek()) * REQUEST_MS

        for part in exporter.parts(cursor, left):
            size = len(part.body.encode())
            parts.append(size)
            spent["ms"] += UPLOAD_MS_PER_MB * size // 1_000_000
        done = lab.meter.take()
        requests += len(done)
        if invocations > 1_000:  # a bug, not a figure
            raise RuntimeError("the export does not finish")
    scale = PROJECTED / MESSAGES
    work_ms = requests * REQUEST_MS + UPLOAD_MS_PER_MB * sum(parts) / 1_000_000
    usable_ms = TIMEOUT_MS - RESERVE_MS
    print_table(
        f"4x. /memory export of a member with {PROJECTED:,} recorded messages",
        ["figure", f"{MESSAGES:,} (measured)", f"{PROJECTED:,} (projected)"],
        [
            ("records exported", f"{cursor.items:,}", f"{round(cursor.items * scale):,}"),
            ("DynamoDB requests", f"{requests:,}", f"{round(requests * scale):,}"),
            ("parts (JSON files, one DM each)", len(parts), round(len(parts) * scale)),
            ("bytes, all parts", f"{sum(parts):,}", f"{round(sum(parts) * scale):,}"),
            ("largest part, bytes", f"{max(parts):,}", f"{max(parts):,}"),
            ("simulated work, s", f"{work_ms / 1000:.1f}", f"{work_ms * scale / 1000:.1f}"),
            ("AnswerFunction invocations", invocations, math.ceil(work_ms * scale / usable_ms)),
        ],
        [
            f"Simulated time: {REQUEST_MS} ms a DynamoDB request, {UPLOAD_MS_PER_MB / 1000:g} s a",
            f"megabyte uploaded to Discord; {TIMEOUT_MS // 1000} s an invocation, stopping 15 s",
            "short. Each page: one Query of the by_user index (100 keys) and one BatchGetItem.",
            "An invocation that stops starts the next with its cursor (AnswerFunction invokes",
            "itself, at most 50 in a row). Projected: records, requests, parts and bytes times",
            "ten; invocations, the simulated work over the 75 s an invocation works.",
        ],
    )
