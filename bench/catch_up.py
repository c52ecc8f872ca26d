"""Table 10c: catching up on a gap the relay could not receive (botmemory.catchup), through
CatchUpFunction as template.yaml wires it (tests/support/catch_up.py), against the fake
Discord REST server on 127.0.0.1 with its history and a per-channel bucket of 5 reads a
5 s window (Discord announces its own in the headers; the worker follows them).

An unresumable 30-minute gap in which 1,000 messages were said (one edited since, one said
and deleted), an older message deleted in it and one edited in it. Lost = messages said in
the gap (and still there) that the table does not hold after catching up (target 0).
Throughput: messages read back a second, on the bucket's clock (the run time here plus the
seconds the queue delayed the next pages), one channel; channels go in parallel, two
workers at most.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "relay"), str(ROOT / "layers" / "core"), str(ROOT)]

import boto3  # noqa: E402
import pytest  # noqa: E402
from moto import mock_aws  # noqa: E402
from tables import print_table  # noqa: E402

from botmemory.records import ObservationKind  # noqa: E402
from botmemory.storage.catchup import CatchUpStore  # noqa: E402
from botmemory.storage.schema import create_table  # noqa: E402
from localrun.fakeaws import REGION, fake_aws_environment  # noqa: E402
from relay.store import Store  # noqa: E402
from tests.support.fake_discord import FakeDiscordRest  # noqa: E402

# The tests' harness, imported by name: its own imports (the test suite's support) are not
# type-checked with the bench.
harness: Any = importlib.import_module("tests.support.catch_up")
TABLE: str = harness.TABLE

SAID = 1_000
EDITED = "in the gap 7, corrected"  # tests/support/catch_up.py's edit
BUCKET = (5, 5.0)  # reads a window, seconds


def patch_fake_aws(patch: pytest.MonkeyPatch) -> None:
    """The fake-AWS environment for a bench run through the functions (table 10d's too),
    their log lines kept to errors."""
    for name, value in fake_aws_environment("bench-person-hash-key-0123456789").items():
        if value is None:
            patch.delenv(name, raising=False)
        else:
            patch.setenv(name, value)
    patch.setenv("POWERTOOLS_LOG_LEVEL", "ERROR")


def catch_up_rows() -> list[tuple[object, ...]]:
    with (
        pytest.MonkeyPatch.context() as patch,
        mock_aws(),
        FakeDiscordRest.running() as discord,
        # The functions' metrics and log lines (JSON on stdout) are not the bench's output.
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        patch_fake_aws(patch)
        client = boto3.client("dynamodb", region_name=REGION)
        create_table(client, TABLE)
        stack = harness.Stack(patch, discord)
        gap = harness.thirty_minute_gap(stack, client, SAID)
        discord.enforce_buckets(*BUCKET, clock=stack.bucket_clock)
        started, clock_started = time.perf_counter(), stack.bucket_clock()
        stack.catch_up()
        elapsed = time.perf_counter() - started
        reading = stack.bucket_clock() - clock_started
        items = harness.observations(client, harness.GENERAL)
        counters = CatchUpStore(client, TABLE).counters(Store.gaps_sk(gap.gap_to, 0))
        reads = discord.requests_matching("GET", f"/channels/{harness.GENERAL}/messages")
        refused = len(discord.rate_limited)
    held = harness.of_kind(items, ObservationKind.MESSAGE)
    lost = [m for m in gap.said if m not in held]
    waited = stack.seconds
    return [
        ("messages said in the gap", len(gap.said)),
        ("lost after catching up (target 0)", len(lost)),
        ("edited in the gap, kept as its current text", int(held.get(gap.said[7]) == [EDITED])),
        ("deleted in the gap, forgotten", len(harness.of_kind(items, ObservationKind.DELETE))),
        ("said and deleted in the gap, kept", int(gap.fleeting in held)),
        ("REST pages read (100 messages a page)", len(reads)),
        ("requests refused with 429", refused),
        ("channels read / skipped (no access)", f"{counters['channels']} / {counters['skipped']}"),
        ("seconds the queue delayed pages (bucket waits)", round(waited)),
        ("seconds to read it all (run time here + queue delays)", round(reading, 1)),
        ("messages read back a second, one channel", round(SAID / max(reading, 0.001))),
        ("wall seconds here (moto, 127.0.0.1)", round(elapsed, 1)),
    ]


def bench_catch_up() -> None:
    logging.getLogger("botmemory").setLevel(logging.ERROR)
    print_table(
        "10c. Catching up on an unresumable 30-minute gap (CatchUpFunction, REST pages)",
        ("figure", "value"),
        catch_up_rows(),
        [
            "the fake's bucket: 5 reads of a channel's history a 5 s window; the next page is "
            "delayed on the queue by the wait the headers announce, never refused",
            "reactions in the gap are not recovered (REST shows only their counts now)",
        ],
    )


def main() -> Any:
    bench_catch_up()


if __name__ == "__main__":
    main()
