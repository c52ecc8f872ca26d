"""Table 4x: `/memory export` of a member with 10,000 and with 100,000 recorded messages, both
measured: the DynamoDB requests by kind, the parts and their bytes, and the AnswerFunction
invocations it takes (botmemory.people.export, botmemory.answering.exports), with the checks
that every record of theirs arrives once and nobody else's does.

The member's messages are seeded straight into moto (`put_in_moto`) across ten channels, with
their SPOKE# items, and another member's messages in the same channels (some words only he
used); each channel holds ten episodes that include the member and mention the other by id
and name. The export runs as AnswerFunction runs it: `deliver_export` itself, with its cursor
carried from one invocation to the next as the event AnswerFunction sends itself (JSON), to a
Discord that keeps the parts. Each invocation sends parts until its time runs short (its 90 s
timeout, the exporter's 15 s reserve). Time is simulated, not measured: each DynamoDB request
counts `REQUEST_MS`, each part's upload `UPLOAD_MS_PER_MB` a megabyte, so the invocation count
does not depend on this machine.

Resumption is part of the run: the member's DMs refuse one part (`REFUSED_PART`, in the
second invocation at 100,000), which stops the export with its cursor kept in the table; the
member runs the command again, which reads the kept cursor and goes on (a chain of its own).
The refused part ends inside a Query page, and its records are sent again in the next part.

Measured (both sizes run for real; figures include the refused part read and sent again):
10,000 messages: 10,111 records in 4 parts (4.1 MB, the largest 1.1 MB), 170 DynamoDB
requests (25 Query, 130 BatchGetItem), 2 invocations (one a command), 7 s of bench time;
100,000 messages: 100,111 records in 38 parts (40.4 MB, the largest 1.1 MB), 1,160 requests
(115 Query, 1,029 BatchGetItem), 3 invocations (the first command's chain of two, then one),
about 2 minutes of bench time on 2 shared cores. Every check holds at both sizes.
Before, pages of 100 keys (a Query and a BatchGetItem each) took 222 requests at 10,000 (23 s
of bench time), and 100,000 was only projected: moto answered each page by sorting every item
of the index and walking past the pages already read (cProfile: over 85% of the time): ten
times the pages, each ten times the work, some 40 minutes (estimated). Pages of 1,000 keys
cut the Queries tenfold, and localrun/fastmoto.py reads such a page as moto would, without
sorting the whole index.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from tables import print_table
from world import Lab

from botmemory.answering.exports import deliver_export, export_request_of
from botmemory.discord.errors import DiscordApiError
from botmemory.discord.rest import MAX_ATTACHMENT_BYTES, DiscordApi
from botmemory.records import Episode, Observation, ObservationKind
from botmemory.services import MemoryServices
from botmemory.storage import keys
from botmemory.storage.items import episode_values, observation_values
from botmemory.storage.keys import observation_sk
from localrun import gateway as gw
from localrun.storage import put_in_moto

SIZES = (10_000, 100_000)
# The part the member's DMs refuse (Discord's 403): in the first invocation at 10,000 (it
# has one), in the second at 100,000.
REFUSED_PART = {10_000: 3, 100_000: 33}
CHANNELS = 10
EPISODES_PER_CHANNEL = 10
OTHERS_EVERY = 10  # another member's message for every ten of theirs
MEMBER = "300000000000000042"
OTHER_WORDS = "marmalade quince"  # only the other member says these
DM_CHANNEL = "250000000000000042"
TIMEOUT_MS = 90_000  # AnswerFunction's Timeout in template.yaml
REQUEST_MS = 10  # a DynamoDB request in the region, answered
UPLOAD_MS_PER_MB = 2_000  # a DM with a file attached, per megabyte
MAX_RUNS = 5  # the member's /memory export commands: more is a bug, not a figure


def _messages(channels: list[str], now: int, count: int, author: str, name: str) -> Iterator[Any]:
    for n in range(count):
        at = now - (count - n) * 1_000 - (500 if author != MEMBER else 0)
        said = OTHER_WORDS if author != MEMBER else "the hives did well this week"
        yield observation_values(
            Observation(
                channel_id=channels[n % CHANNELS],
                scope=gw.GUILD,
                sk=observation_sk(at, ObservationKind.MESSAGE, gw.snowflake(at)),
                kind=ObservationKind.MESSAGE,
                at_ms=at,
                author_id=author,
                author_name=name,
                message_id=gw.snowflake(at),
                content=f"message {n}: {said}, honey by friday",
            ),
            pending=False,
        )


def _seed(lab: Lab, messages: int) -> MemoryServices:
    world = lab.world()
    repository, now = world.services.repository, world.clock.now_ms()
    channels = [str(200000000000000600 + c) for c in range(CHANNELS)]
    put_in_moto(repository, _messages(channels, now, messages, MEMBER, "Zephyrine"))
    put_in_moto(repository, _messages(channels, now, messages // OTHERS_EVERY, gw.BOB, "Bob"))
    spoke = [
        {"pk": keys.user_pk(gw.GUILD, MEMBER), "sk": f"{keys.SPOKE_PREFIX}{channel}"}
        | {"user_id": MEMBER, "scope": gw.GUILD}
        for channel in channels
    ]
    put_in_moto(repository, spoke)
    put_in_moto(
        repository,
        [
            episode_values(
                Episode(
                    channel_id=channel,
                    episode_id=f"e{c}{e}",
                    sk=keys.episode_sk(now - e * 60_000, f"e{c}{e}"),
                    summary=f"Zephyrine and <@{gw.BOB}> (Bob) talked about bees ({e})",
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
    return world.services


@dataclass
class Dms:
    """Discord as the export meets it: the member's DM, each part's upload kept and its time
    counted, one part refused (403: the DMs closed), the answer's edits kept."""

    refused_part: int
    parts: list[bytes] = field(default_factory=list)
    uploads: int = 0
    upload_ms: int = 0  # this invocation's
    all_upload_ms: int = 0
    answers: list[str] = field(default_factory=list)

    def open_dm(self, user_id: str) -> str:
        return DM_CHANNEL

    def send_files(
        self, channel_id: str, content: str, files: Sequence[tuple[str, bytes]], *, nonce: str
    ) -> dict[str, Any]:
        self.uploads += 1
        if self.uploads == self.refused_part:
            raise DiscordApiError(403, "Cannot send messages to this user", code=50007)
        for _, data in files:
            self.parts.append(data)
            self.upload_ms += UPLOAD_MS_PER_MB * len(data) // 1_000_000
            self.all_upload_ms += UPLOAD_MS_PER_MB * len(data) // 1_000_000
        return {}

    def edit_original_response(
        self, application_id: str, interaction_token: str, body: Mapping[str, Any]
    ) -> dict[str, Any]:
        self.answers.append(str(body.get("content", "")))
        return {}


@dataclass
class Run:
    messages: int
    requests: Counter[str] = field(default_factory=Counter)
    invocations: int = 0
    runs: int = 0  # the member's commands
    refused_in: int = 0  # the invocation whose part was refused
    dms: Dms = field(default_factory=lambda: Dms(0))
    records: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0


def _export(lab: Lab, services: MemoryServices, run: Run) -> None:
    """The member's command, then every invocation it leads to; the command again while the
    export is unfinished (its cursor kept in the table)."""
    person = services.opt_outs.hash_of(MEMBER)
    interaction = {"id": gw.snowflake(services.clock.now_ms()), "token": "t", "application_id": "1"}
    finished = False
    while not finished:
        run.runs += 1
        if run.runs > MAX_RUNS:
            raise RuntimeError("the export does not finish")
        cursor = services.repository.export_cursor(person)  # what the command reads
        events = [{"export": {"user_id": MEMBER, "interaction": interaction, "cursor": cursor}}]
        while events:
            event = json.loads(json.dumps(events.pop(0)))  # as Lambda carries it
            run.invocations += 1
            run.dms.upload_ms = 0

            def left() -> int:
                requests = len(lab.meter.peek()) * REQUEST_MS
                return TIMEOUT_MS - run.dms.upload_ms - requests

            report = deliver_export(
                services, cast("DiscordApi", run.dms), export_request_of(event), left, events.append
            )
            run.requests.update(r.operation for r in lab.meter.take())
            finished = report.finished
            if report.dms_closed:
                run.refused_in = run.invocations
    for part in run.dms.parts:
        run.records += json.loads(part)["records"]


def _checks(run: Run) -> dict[str, bool]:
    """Every record of theirs once (their messages by id, episodes by channel and time, the
    rest by kind), nobody else's id, name or words, every part under Discord's limit, the
    export stopped and run again."""
    records = run.records
    said = [r["message_id"] for r in records if r["record"] == "observation"]
    episodes = {(r["channel_id"], r["start_ms"]) for r in records if r["record"] == "episode"}
    kinds = Counter(r["record"] for r in records if r["record"] != "observation")
    text = "\n".join(p.decode() for p in run.dms.parts)
    return {
        "each message once (count, ids)": len(said) == len(set(said)) == run.messages,
        "each other record once": len(episodes) == CHANNELS * EPISODES_PER_CHANNEL
        and kinds == {"spoke": CHANNELS, "episode": len(episodes), "settings": 1},
        "no other member (id, name, words)": not any(
            w in text for w in (gw.BOB, "Bob", *OTHER_WORDS.split())
        ),
        "every part under Discord's limit": max(map(len, run.dms.parts)) < MAX_ATTACHMENT_BYTES,
        "stopped, then run again to the end": run.refused_in > 0 and run.runs == 2,
    }


def _measured(lab: Lab, messages: int) -> Run:
    started = time.perf_counter()
    services = _seed(lab, messages)
    run = Run(messages, dms=Dms(REFUSED_PART[messages]))
    _export(lab, services, run)
    run.seconds = time.perf_counter() - started
    return run


def _work_s(run: Run) -> float:
    """The simulated time of every invocation: requests and uploads."""
    return (run.requests.total() * REQUEST_MS + run.dms.all_upload_ms) / 1000


def bench_export(lab: Lab) -> None:
    runs = [_measured(lab, messages) for messages in SIZES]
    kinds = sorted({k for run in runs for k in run.requests})
    rows: list[tuple[object, ...]] = [
        ("records exported", *(f"{len(r.records):,}" for r in runs)),
        ("DynamoDB requests", *(f"{r.requests.total():,}" for r in runs)),
        *((f"  {kind}", *(f"{r.requests[kind]:,}" for r in runs)) for kind in kinds),
        ("parts sent (JSON files, one DM each)", *(len(r.dms.parts) for r in runs)),
        ("bytes, all parts", *(f"{sum(map(len, r.dms.parts)):,}" for r in runs)),
        ("largest part, bytes", *(f"{max(map(len, r.dms.parts)):,}" for r in runs)),
        ("simulated work, s", *(f"{_work_s(r):.1f}" for r in runs)),
        ("AnswerFunction invocations", *(r.invocations for r in runs)),
        ("  the one whose part was refused", *(r.refused_in for r in runs)),
        ("/memory export commands", *(r.runs for r in runs)),
        ("bench wall time, s (seeding included)", *(f"{r.seconds:.0f}" for r in runs)),
    ]
    checks = [_checks(r) for r in runs]
    rows += [(name, *("yes" if c[name] else "NO" for c in checks)) for name in checks[0]]
    print_table(
        "4x. /memory export of a member with 10,000 and 100,000 recorded messages (measured)",
        ["figure", *(f"{r.messages:,} messages" for r in runs)],
        rows,
        [
            f"Simulated time: {REQUEST_MS} ms a DynamoDB request, {UPLOAD_MS_PER_MB / 1000:g} s a",
            f"megabyte uploaded to Discord; {TIMEOUT_MS // 1000} s an invocation, stopping 15 s",
            "short. A Query page of the by_user index holds 1,000 keys, read by ten BatchGetItem",
            "calls; a part closes at 1 MB wherever that falls. Part "
            + " and ".join(str(REFUSED_PART[m]) for m in SIZES)
            + " refused (DMs closed): the",
            "export stops with its cursor kept, the member runs the command again, it goes on.",
        ],
    )
