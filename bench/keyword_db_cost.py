"""Table 8d: what the keyword database (KeywordIndex=postgres: Aurora PostgreSQL Serverless
v2 through the RDS Data API) costs, at three loads, per million messages and per 1,000
recalls, at bench/prices.toml's list prices. Pure arithmetic on stated counts, so
tests/bench checks it on known input.

Counts: a consolidation round is one Data API call (its passages, its counts, the page of
passages waiting for vectors: table 3f), a recall one call, a stream removal one call; a
round indexes ROUND_MESSAGES messages. Bytes kept: table 3f's database size per passage.

Capacity is what decides the bill. Aurora pauses an instance only after
SECONDS_UNTIL_PAUSE without a connection, so a server talking every few minutes keeps it at
its floor of 0.5 ACU all month; a busy one scales by load (BUSY_ACU assumed).
"""

from __future__ import annotations

from dataclasses import dataclass

from tables import MILLION

HOURS_A_MONTH = 730
FLOOR_ACU = 0.5  # the least a running (not paused) Serverless v2 instance is billed
BUSY_ACU = 2.0  # assumed average of a busy server (KeywordMaxCapacity's default)
SECONDS_UNTIL_PAUSE = 300  # template.yaml's SecondsUntilAutoPause, Aurora's least
ROUND_MESSAGES = 20  # messages a consolidation round indexes (a full batch)
CALLS_PER_ROUND = 1  # the round's one statement (table 3f)
IO_PER_CALL = 20  # Aurora I/O requests a statement costs, assumed (a few pages read and written)
BYTES_PER_PASSAGE = 2_000  # table 3f: database size per passage, indexes included, rounded up


@dataclass(frozen=True)
class Load:
    name: str
    running_hours: float  # instance hours not paused, a month
    acu: float  # average capacity while running
    messages: int  # messages a month
    recalls: int  # recalls with a query a month


LOADS = (
    Load("idle (paused all month)", 0.0, 0.0, 0, 0),
    Load("light but steady (a message every few minutes)", HOURS_A_MONTH, FLOOR_ACU, 20_000, 2_000),
    Load("busy (a message a second)", HOURS_A_MONTH, BUSY_ACU, 2_600_000, 100_000),
)


def monthly(load: Load, prices: dict[str, float]) -> dict[str, float]:
    """One month of a load: capacity, storage of what its messages leave, I/O, Data API."""
    calls = load.messages / ROUND_MESSAGES * CALLS_PER_ROUND + load.recalls
    stored_gb = load.messages * BYTES_PER_PASSAGE / 1024**3
    return {
        "capacity": load.running_hours * load.acu * prices["aurora_acu_hour"],
        "storage": stored_gb * prices["aurora_storage_gb_month"],
        "I/O": calls * IO_PER_CALL / MILLION * prices["aurora_io_per_million"],
        "Data API": calls / MILLION * prices["data_api_per_million"],
    }


def per_million_messages(prices: dict[str, float]) -> float:
    """Requests and a month of storage of a million messages, capacity aside (it is per hour,
    not per message: the loads above)."""
    calls = MILLION / ROUND_MESSAGES * CALLS_PER_ROUND
    return (
        calls / MILLION * prices["data_api_per_million"]
        + calls * IO_PER_CALL / MILLION * prices["aurora_io_per_million"]
        + MILLION * BYTES_PER_PASSAGE / 1024**3 * prices["aurora_storage_gb_month"]
    )


def per_thousand_recalls(prices: dict[str, float]) -> float:
    """One Data API call and its I/O per recall, capacity aside."""
    return (
        1000
        * (prices["data_api_per_million"] + IO_PER_CALL * prices["aurora_io_per_million"])
        / MILLION
    )


def cost_rows(prices: dict[str, float]) -> list[tuple[object, ...]]:
    rows: list[tuple[object, ...]] = []
    for load in LOADS:
        parts = monthly(load, prices)
        rows.append(
            (load.name, *(f"{parts[k]:,.2f}" for k in parts), f"{sum(parts.values()):,.2f}")
        )
    return rows


def print_keyword_db_costs(prices: dict[str, float], date: str) -> None:
    from tables import print_table

    print_table(
        f"8d. The keyword database a month (Aurora Serverless v2 + Data API, prices of {date})",
        ["load", "capacity", "storage", "I/O", "Data API", "total"],
        cost_rows(prices),
        [
            f"Per million messages, capacity aside: ${per_million_messages(prices):,.2f}"
            f" (a call a round of {ROUND_MESSAGES}, {IO_PER_CALL} I/O a call, a month of"
            f" {BYTES_PER_PASSAGE:,} bytes a passage); per 1,000 recalls:"
            f" ${per_thousand_recalls(prices):,.4f}.",
            f"Capacity: ${prices['aurora_acu_hour']} per ACU-hour; paused costs nothing, but a",
            f"pause needs {SECONDS_UNTIL_PAUSE} s without a connection, so a server that talks",
            f"every few minutes keeps {FLOOR_ACU} ACU all month. Busy: {BUSY_ACU} ACU assumed.",
            "Resuming takes about 15 s (30 s after a day paused): the first recall and round",
            "meanwhile go without the keyword leg (counted: RecallKeywordLegFailed,",
            "SearchIndexVectorsOnly). KeywordIndex=none: no database, none of these lines.",
        ],
    )
