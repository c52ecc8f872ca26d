"""Table 10d: a backfill staff ask for (`/memory-staff backfill start`), then its
consolidation: the memory model calls per 1,000 imported messages, beside the live figure
(table 2d's typical channel, measured in the same run).

The import goes as table 10c's catch-up does (tests/support/catch_up.py): staff start it
through InteractionsFunction, CatchUpFunction reads each channel's pages from the fake
Discord REST server on 127.0.0.1, its per-channel bucket enforced. The history: LoCoMo's
conversations (one a channel, their turns spread over the last days), or the bench's chat
lines where that dataset is not on the machine. Then the table's stream takes what was
imported to ConsolidateFunction, its work queue to ConsolidateWorkerFunction, and the sweep
runs on its schedule, over simulated hours (tests/support/simulated_deployment.py), with the
rules model counted: every model call a round makes, its batch and its order.

Two runs of the same server. Held: the stream waits for the import's end, and each
channel's backlog is consolidated in grown rounds (botmemory.consolidation.backlog), bounded by
MEMORY_BATCH_MAX_TOKENS and BACKLOG_MAX_OBSERVATIONS: the fewest calls. Live: the stream and
the worker run between the import's pages (as deployed), each page's delay passing on their
clock: a round takes what the pages brought since the last, here a page each, the most calls.
A deployment sits between the two: its model takes seconds a call while pages keep coming,
and SQS drops a channel's repeated stream message for 5 minutes (moto only while the first is
queued), so its rounds take a page or more. The live figure is the status's estimate
(botmemory.catchup.backfill.MODEL_CALLS_PER_1000).
"""

from __future__ import annotations

import contextlib
import importlib
import io
import itertools
import json
import logging
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "relay"), str(ROOT / "layers" / "core"), str(ROOT)]

import boto3  # noqa: E402
import pytest  # noqa: E402
from catch_up import patch_fake_aws  # noqa: E402
from moto import mock_aws  # noqa: E402
from tables import print_table  # noqa: E402
from world import CHAT_LINES  # noqa: E402

from botmemory.catchup.backfill import MODEL_CALLS_PER_1000  # noqa: E402
from botmemory.clock import DAY_MS  # noqa: E402
from botmemory.consolidation.batch import (  # noqa: E402
    BACKLOG_MAX_OBSERVATIONS,
    LINE_FRAME_TOKENS,
    estimated_tokens,
)
from botmemory.consolidation.model.contract import (  # noqa: E402
    ConsolidationAnswer,
    ModelInput,
    render_batch,
)
from botmemory.consolidation.model.rules import RulesModel  # noqa: E402
from botmemory.records import Episode, ObservationKind  # noqa: E402
from botmemory.runtime import build_services  # noqa: E402
from botmemory.settings.config import Settings  # noqa: E402
from botmemory.storage import keys  # noqa: E402
from botmemory.storage.schema import PENDING_INDEX, create_table  # noqa: E402
from localrun.fakeaws import REGION  # noqa: E402
from localrun.fastmoto import fast_dynamodb  # noqa: E402
from localrun.replay import SHARED_DATASET  # noqa: E402
from tests.support.fake_discord import FakeDiscordRest  # noqa: E402

# The tests' harnesses, imported by name: their own imports (the test suite's support) are
# not type-checked with the bench.
catch_up: Any = importlib.import_module("tests.support.catch_up")
simulated: Any = importlib.import_module("tests.support.simulated_deployment")
deployment_events: Any = importlib.import_module("tests.support.deployment")
TABLE: str = catch_up.TABLE

CHANNELS = 4
PER_CHANNEL = 1_000  # messages a channel: more than one grown round holds (40,000 tokens)
DAYS = 6  # the history's span; staff ask for a week
BUCKET = (5, 5.0)  # the fake Discord's reads a window, seconds (table 10c's)
HOUR_MS = 3_600_000
SETTLE_MS = 2 * HOUR_MS  # simulated time after the import: every tail's idle flush is due


@dataclass(frozen=True)
class Call:
    """One memory model call: its channel, and the observations it read."""

    channel: str
    observations: int
    tokens: int  # their lines' estimated tokens, as the batch's bound counts them
    chars: int  # the whole input rendered (the facts, the summary and the frame besides)
    first_ms: int
    last_ms: int


@dataclass
class Counted:
    """Every call the rules model is asked, in order; recompressions counted apart."""

    calls: list[Call] = field(default_factory=list)
    recompressions: int = 0

    @property
    def total(self) -> int:
        return len(self.calls) + self.recompressions


@dataclass
class Backfilled:
    said: int  # messages in the channels' history
    imported: int  # messages the table holds after the import
    channels: int
    days: float  # from the oldest imported message to the newest
    counted: Counted
    live_per_thousand: float
    pending: int  # imported observations no round consumed (target 0)
    episodes: dict[str, list[Episode]]
    facts: int
    refused: int  # requests the fake Discord answered with 429
    rounds_importing: int  # rounds done before the import ended
    import_seconds: float
    consolidate_seconds: float
    batch_max_tokens: int = Settings().batch_max_tokens

    @property
    def per_thousand(self) -> float:
        return round(self.counted.total * 1000 / max(self.imported, 1), 1)

    @property
    def largest(self) -> Call | None:
        return max(self.counted.calls, key=lambda c: c.observations, default=None)

    def in_time_order(self) -> bool:
        """Each channel's calls read its observations oldest first (each call's after the
        one before it), and its episodes follow one another without overlapping."""
        for channel in {c.channel for c in self.counted.calls}:
            mine = [c for c in self.counted.calls if c.channel == channel]
            if any(b.first_ms < a.last_ms for a, b in itertools.pairwise(mine)):
                return False
        for episodes in self.episodes.values():
            ordered = sorted(episodes, key=lambda e: e.start_ms)
            if any(b.start_ms <= a.end_ms for a, b in itertools.pairwise(ordered)):
                return False
        return True

    def episodes_span_days(self) -> bool:
        """Every channel has episodes, and they reach from its first imported day to its last."""
        return len(self.episodes) == self.channels and all(
            episodes
            and max(e.end_ms for e in episodes) - min(e.start_ms for e in episodes)
            >= (self.days - 1) * DAY_MS
            for episodes in self.episodes.values()
        )


def history_lines(
    channels: int, per_channel: int, dataset: Path | None
) -> list[list[tuple[str, str]]]:
    """Each channel's lines, (speaker's name, text): LoCoMo's turns in the dataset's order,
    cut into channels of `per_channel` (a channel may hold the end of one conversation and the
    start of the next), when the dataset is on the machine; the bench's chat lines otherwise."""
    paths = sorted(dataset.glob("*.json")) if dataset and dataset.is_dir() else []
    turns: list[tuple[str, str]] = []
    for path in paths:
        if len(turns) >= channels * per_channel:
            break
        conversation = json.loads(path.read_text())
        turns += [
            (str(turn["speaker"]), str(turn["text"]))
            for session in range(1, 100)
            for turn in conversation.get(f"session_{session}", [])
            if turn.get("text")
        ]
    if len(turns) < channels * per_channel:  # no dataset here: the bench's chat lines
        turns = [
            (f"speaker {i % 3}", CHAT_LINES[(i * 5 + i // 8) % len(CHAT_LINES)])
            for i in range(channels * per_channel)
        ]
    return [turns[c * per_channel : (c + 1) * per_channel] for c in range(channels)]


def _channel(index: int) -> str:
    return f"2000000000000003{index:02d}"


def say_history(
    discord: FakeDiscordRest, now_ms: int, channels: int, per_channel: int, dataset: Path | None
) -> int:
    """The channels' past in the fake Discord, spread evenly over the last DAYS days, each
    speaker one member."""
    said = 0
    start = now_ms - DAYS * DAY_MS
    members: dict[str, str] = {}
    for c, lines in enumerate(history_lines(channels, per_channel, dataset)):
        step = (DAYS * DAY_MS - HOUR_MS) // max(len(lines), 1)
        for i, (speaker, text) in enumerate(lines):
            member = members.setdefault(speaker, f"{300_000_000_000_000_400 + len(members)}")
            discord.history.say(_channel(c), start + i * step + c, member, text, name=speaker)
            said += 1
    return said


@contextlib.contextmanager
def counting(patch: pytest.MonkeyPatch) -> Iterator[Counted]:
    """The rules model (what every function runs here, events/env.json), each call counted
    with what it read."""
    counted = Counted()
    consolidate, recompress = RulesModel.consolidate, RulesModel.recompress

    def counted_consolidate(self: RulesModel, batch: ModelInput) -> ConsolidationAnswer:
        lines = batch.observations
        counted.calls.append(
            Call(
                channel=batch.channel_id,
                observations=len(lines),
                tokens=sum(
                    estimated_tokens(f"{o.author_name}{o.text}") + LINE_FRAME_TOKENS for o in lines
                ),
                chars=len(render_batch(batch)),
                first_ms=min((o.at_ms or 0 for o in lines), default=0),
                last_ms=max((o.at_ms or 0 for o in lines), default=0),
            )
        )
        return consolidate(self, batch)

    def counted_recompress(self: RulesModel, summary: str, target_chars: int) -> str:
        counted.recompressions += 1
        return recompress(self, summary, target_chars)

    patch.setattr(RulesModel, "consolidate", counted_consolidate)
    patch.setattr(RulesModel, "recompress", counted_recompress)
    yield counted


def pending(client: Any, channel: str) -> int:
    """Observations of the channel still on the pending index (none once consumed)."""
    request: dict[str, Any] = {
        "TableName": TABLE,
        "IndexName": PENDING_INDEX,
        "KeyConditionExpression": "pk = :pk",
        "ExpressionAttributeValues": {":pk": {"S": keys.channel_pk(channel)}},
        "Select": "COUNT",
    }
    total = 0
    while True:
        page = client.query(**request)
        total += int(page["Count"])
        if "LastEvaluatedKey" not in page:
            return total
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


class _Discarded(io.TextIOBase):
    """Where the functions' JSON lines go; never closed, as their loggers keep it."""

    def write(self, text: str) -> int:
        return len(text)


_DISCARD = _Discarded()


@contextlib.contextmanager
def quiet_fake_aws(patch: pytest.MonkeyPatch) -> Iterator[Any]:
    """moto (made fast: localrun.fastmoto) with fake credentials, the functions' JSON lines
    (metrics, logs) kept off the bench's output; the DynamoDB client."""
    with (
        mock_aws(),
        fast_dynamodb(),
        contextlib.redirect_stdout(_DISCARD),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        patch_fake_aws(patch)
        yield boto3.client("dynamodb", region_name=REGION)


def live_per_thousand() -> float:
    """Table 2d's typical channel (the bot answers 1 message in 20, the refresh at its
    default): its model calls per 1,000 messages, measured again here."""
    from model_calls import MESSAGES, SCENARIOS, model_calls
    from world import Lab

    _, answers, messages = SCENARIOS[0]
    with pytest.MonkeyPatch.context() as patch, quiet_fake_aws(patch) as client:
        lab = Lab(client)
        try:
            calls = model_calls(lab, answers, Settings().answered_turns_per_refresh, messages)
        finally:
            lab.close()
    return round(calls * MESSAGES / messages, 1)


def imported_messages(client: Any, channel: str) -> int:
    """The channel's messages the table holds (each stored once, by its id)."""
    request: dict[str, Any] = {
        "TableName": TABLE,
        "KeyConditionExpression": "pk = :pk AND begins_with(sk, :obs)",
        "ExpressionAttributeValues": {
            ":pk": {"S": keys.channel_pk(channel)},
            ":obs": {"S": keys.OBS_PREFIX},
        },
    }
    held = 0
    while True:
        page = client.query(**request)
        held += len(catch_up.of_kind(page["Items"], ObservationKind.MESSAGE))
        if "LastEvaluatedKey" not in page:
            return held
        request["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def backfill(
    channels: int = CHANNELS,
    per_channel: int = PER_CHANNEL,
    *,
    live_stream: bool,
    live_per_thousand: float = 0.0,
    dataset: Path | None = SHARED_DATASET,
    environment: dict[str, str] | None = None,
) -> Backfilled:
    """Staff's backfill of `channels` channels of `per_channel` messages over DAYS days, and
    the consolidation of what it imported, counted: with `live_stream`, the stream and the
    worker run between the import's pages (as deployed); without, once the import is over.
    LoCoMo's turns from `dataset` (None: the bench's chat lines); `environment`: settings of
    the deployment's functions (MEMORY_BATCH_MAX_TOKENS...)."""
    environment = environment or {}
    with (
        pytest.MonkeyPatch.context() as patch,
        quiet_fake_aws(patch) as client,
        FakeDiscordRest.running() as discord,
    ):
        create_table(client, TABLE)
        now = int(time.time() * 1000)
        deployment = simulated.SimulatedDeployment(
            patch, client, start_ms=now, environment=environment, discord_url=discord.url
        )
        stack = catch_up.Stack(patch, discord)
        names = [_channel(c) for c in range(channels)]
        stack.local.invoke(
            "IngestFunction", {"events": [deployment_events.guild_create(names, [])]}
        )
        said = say_history(discord, now, channels, per_channel, dataset)
        discord.enforce_buckets(*BUCKET, clock=stack.bucket_clock)
        started = time.perf_counter()
        with counting(patch) as counted:
            answer = stack.staff("start", {"days": DAYS + 1})
            assert answer.startswith("Backfill started"), answer  # nosec B101
            if live_stream:  # the next page comes after its delay; meanwhile, the deployment
                clock = deployment.clock
                stack.drain(meanwhile=lambda s: deployment.run_until(clock.now_ms() + s * 1000))
            else:
                stack.drain()
            imported = sum(imported_messages(client, c) for c in names)
            rounds_importing = len(counted.calls)
            consolidating = time.perf_counter()
            deployment.run_until(deployment.clock.now_ms() + SETTLE_MS)
        done = time.perf_counter()
        repository = build_services(
            Settings(table_name=TABLE, memory_model="rules"), dynamodb=client
        ).repository
        episodes = {c: list(repository.channel_episodes(c)) for c in names}
        facts = sum(
            1
            for page in client.get_paginator("scan").paginate(TableName=TABLE)
            for item in page["Items"]
            if item["sk"]["S"].startswith(keys.FACT_PREFIX)
        )
        left = sum(pending(client, c) for c in names)
        refused = len(discord.rate_limited)
    bound = environment.get("MEMORY_BATCH_MAX_TOKENS")
    return Backfilled(
        said=said,
        imported=imported,
        channels=channels,
        days=DAYS,
        counted=counted,
        live_per_thousand=live_per_thousand,
        pending=left,
        episodes={c: e for c, e in episodes.items() if e},
        facts=facts,
        refused=refused,
        rounds_importing=rounds_importing,
        import_seconds=consolidating - started,
        consolidate_seconds=done - consolidating,
        batch_max_tokens=int(bound) if bound else Settings().batch_max_tokens,
    )


def backfill_rows(held: Backfilled, live: Backfilled) -> list[tuple[object, ...]]:
    """The figures of both runs side by side: the stream held until the import is over, and
    live during it."""

    def largest(run: Backfilled) -> str:
        call = run.largest
        return f"{call.observations if call else 0:,} / {BACKLOG_MAX_OBSERVATIONS:,}"

    def tokens(run: Backfilled) -> str:
        most = max((c.tokens for c in run.counted.calls), default=0)
        return f"{most:,} / {run.batch_max_tokens:,}"

    def spanned(run: Backfilled) -> str:
        shown = f"{len(run.episodes)} of {run.channels}"
        return shown if run.episodes_span_days() else f"{shown} (short of the span)"

    figures: list[tuple[str, Any]] = [
        ("messages said / imported", lambda r: f"{r.said:,} / {r.imported:,}"),
        ("requests refused with 429", lambda r: r.refused),
        ("memory model calls", lambda r: r.counted.total),
        ("  rounds (one call each)", lambda r: len(r.counted.calls)),
        ("    of them while the import went on", lambda r: r.rounds_importing),
        ("  summary recompressions", lambda r: r.counted.recompressions),
        ("model calls per 1,000 messages imported", lambda r: r.per_thousand),
        ("  live, table 2d's typical channel (target <= 50)", lambda r: r.live_per_thousand),
        ("  `backfill status`'s estimate (MODEL_CALLS_PER_1000)", lambda r: MODEL_CALLS_PER_1000),
        (
            "messages a round, on average",
            lambda r: round(r.imported / max(len(r.counted.calls), 1)),
        ),
        ("largest round: messages / BACKLOG_MAX_OBSERVATIONS", largest),
        ("largest round: estimated tokens / MEMORY_BATCH_MAX_TOKENS", tokens),
        (
            "largest model input, characters rendered",
            lambda r: f"{max((c.chars for c in r.counted.calls), default=0):,}",
        ),
        ("observations left unconsumed (target 0)", lambda r: r.pending),
        ("consolidated in time order, per channel", lambda r: "yes" if r.in_time_order() else "NO"),
        ("channels with episodes spanning the imported days", spanned),
        ("facts written", lambda r: r.facts),
        ("wall seconds here: import", lambda r: round(r.import_seconds)),
        ("wall seconds here: consolidation after it", lambda r: round(r.consolidate_seconds)),
    ]
    return [(name, figure(held), figure(live)) for name, figure in figures]


def bench_backfill(channels: int = CHANNELS, per_channel: int = PER_CHANNEL) -> None:
    logging.getLogger("botmemory").setLevel(logging.ERROR)
    live_rate = live_per_thousand()
    held = backfill(channels, per_channel, live_stream=False, live_per_thousand=live_rate)
    live = backfill(channels, per_channel, live_stream=True, live_per_thousand=live_rate)
    print_table(
        "10d. Backfill when staff ask: model calls per 1,000 messages",
        ("figure", "stream held until imported", "stream live (the most)"),
        backfill_rows(held, live),
        [
            f"staff start a backfill of {channels} channels x {per_channel:,} messages over "
            f"{DAYS} days ({'LoCoMo turns' if SHARED_DATASET.is_dir() else 'chat lines'}); "
            "CatchUpFunction reads the pages under the fake's bucket (table 10c's)",
            "the stream, the work queue's worker and the sweep every 5 minutes consolidate it "
            "over simulated hours, the rules model counted (each call, and what it read)",
            "held: the stream waits for the import's end, each backlog goes in grown rounds; "
            "live: they run between pages (each page's delay passes on their clock)",
            "live is the most a backfill costs: the model answers at once here, and moto keeps "
            "no repeated stream message out once the first was taken (SQS: 5 minutes), so "
            "every page is a round; deployed, a round takes a page or more",
        ],
    )


def main() -> Any:
    bench_backfill()


if __name__ == "__main__":
    main()
