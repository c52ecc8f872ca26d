"""Table 10: the relay fleet (relay/relay/fleet.py) against the fake sharded gateway of
tests/relay/fake_shards.py, which refuses an IDENTIFY sent too early in its bucket.

- Restarts: 8 shards over 2 tasks with messages emitted all along; one task stopped the
  SIGTERM way and one killed (its sink down first, so it dies holding events), each
  replaced. Events lost = messages emitted that no sink received. Real time, 127.0.0.1.
- Storm: 100 shards over 4 tasks; every session invalidated at once (a Discord
  incident); the simulated seconds until every shard is back, with max_concurrency 1
  (most bots) and 16 (large bot sharding). Before this fleet, one process per shard with
  a per-shard ledger: 8 of 100 back after 600 s, 764 IDENTIFYs refused (issue 52).
"""

from __future__ import annotations

import logging
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "relay"), str(ROOT / "layers" / "core"), str(ROOT)]

import boto3  # noqa: E402
from moto import mock_aws  # noqa: E402
from tables import print_table  # noqa: E402

from botmemory.storage.schema import create_table  # noqa: E402
from localrun.fakeaws import REGION  # noqa: E402
from tests.relay.fake_shards import TABLE  # noqa: E402
from tests.relay.test_handover import handover  # noqa: E402
from tests.relay.test_identify_storm import storm  # noqa: E402


def _table() -> Any:
    client = boto3.client("dynamodb", region_name=REGION)
    create_table(client, TABLE)
    return client


def restart_rows() -> list[tuple[object, ...]]:
    with mock_aws(), tempfile.TemporaryDirectory() as tmp:
        fake, tasks = handover(_table(), Path(tmp))
    emitted = {m for ids in fake.emitted.values() for m in ids}
    received = set().union(*(t.message_ids() for t in tasks))
    lost = len(emitted - received)
    resumed = sum(1 for _, ok in fake.resumes if ok)
    return [
        ("events emitted over the run", len(emitted)),
        ("events lost, 2 restarts (SIGTERM, kill)", lost),
        ("events lost per restart (target 0)", lost / 2),
        ("shards RESUMEd by the replacements", resumed),
        ("IDENTIFYs after the first 8", len(fake.identifies) - 8),
        ("closes with 1000/1001", sum(1 for c in fake.closes if c in (1000, 1001))),
    ]


def storm_rows() -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for concurrency in (1, 16):
        with mock_aws():
            result = storm(_table(), 100, 4, concurrency)
            fake = result["fake"]
            rows.append(
                (
                    f"max_concurrency {concurrency}",
                    round(result["back"]),
                    len(fake.identifies),
                    fake.identifies_refused,
                    result["store"].identifies()[0],
                    int(fake.token_reset),
                )
            )
    return rows


def bench_relay_fleet() -> None:
    # The relay's own lines (each lost session, each IDENTIFY) are not the bench's output.
    logging.getLogger("relay").setLevel(logging.ERROR)
    print_table(
        "10a. Relay restarts: 8 shards over 2 tasks, one stopped, one killed, both replaced",
        ("figure", "value"),
        restart_rows(),
        ["the killed task's sink was down for 0.3 s before it died: it held unsent events"],
    )
    print_table(
        "10b. IDENTIFY storm: 100 shards over 4 tasks, every session invalidated at once",
        ("bucket", "s back", "IDENTIFYs", "refused", "counted", "token reset"),
        storm_rows(),
        [
            "s back: simulated seconds from the incident until all 100 shards had READY again",
            "IDENTIFYs: the start's 100 and the storm's 100; counted: the table's daily counter",
            "Discord's floor: 100 IDENTIFYs at one per 5 s per bucket, 500 s (1 bucket), 35 s (16)",
        ],
    )


if __name__ == "__main__":
    bench_relay_fleet()
