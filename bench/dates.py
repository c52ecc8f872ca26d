"""Table 3t: what knowing when costs in characters (botmemory.when, docs/time.md).

The memory block's dates come out of its section budgets without costing a fact or a passage
in rank order its place: a fact line gets its "(said ...)" in the room the sections left, the
query's facts before the passages that only fill it (recall/assemble.py). They are counted here on table 3b's block (3 participants with 20 facts each, no
query), with how many fact lines that room would hold undated. Passages, episodes and the other channels' lines were dated before (now
in the server's zone: the same length). The memory model's batch and the answer prompt
carry their dates beside the budgets: counted on a batch of MEMORY_MAX_BATCH typical lines, and
on one current fact's line (first and last said, valid until).
"""

from __future__ import annotations

import re
import statistics

from tables import print_table
from world import SPEAKERS, Lab, recall_world

from botmemory.answering.prompt import TODAY_NOTE
from botmemory.consolidation.model.contract import (
    KnownFact,
    ModelInput,
    NumberedObservation,
    render_batch,
)
from botmemory.recall.block import FACT_HEADING
from botmemory.recall.contract import RecallRequest
from botmemory.settings.config import Settings
from botmemory.when.zones import today_line
from localrun import gateway as gw

_SAID = re.compile(r" \(said [^)]*\)$")
_TYPICAL = "I finally finished the migration to the new build system, tests are green again"


def _batch_chars(dated: bool, lines: int) -> int:
    now = 1_772_445_600_000  # 2026-03-02 10:00 UTC
    observations = [
        NumberedObservation(
            number=n,
            author_id=f"3000000000000000{n:02d}",
            author_name="Alice",
            kind="msg",
            text=_TYPICAL,
            at_ms=now - (lines - n) * 60_000 if dated else None,
        )
        for n in range(1, lines + 1)
    ]
    batch = ModelInput(
        channel_id=gw.CHANNEL,
        observations=observations,
        now_ms=now if dated else None,
        zone="Europe/Paris",
    )
    return len(render_batch(batch))


def _known_fact_times() -> int:
    """What a current fact's times add to its line in the batch."""
    now = 1_772_445_600_000
    fact = KnownFact(fact_id="01JQ3K8Z7X9V2M4N6P8R0T2W4Y", user_id="1", kind="fact", text="x")
    timed = fact.model_copy(
        update={"first_said_ms": now, "last_said_ms": now + 86_400_000, "valid_until_ms": now}
    )
    return len(
        render_batch(ModelInput(channel_id=gw.CHANNEL, observations=[], facts=[timed]))
    ) - len(render_batch(ModelInput(channel_id=gw.CHANNEL, observations=[], facts=[fact])))


def bench_dates(lab: Lab) -> None:
    world = recall_world(lab, 100, 20)
    result = world.services.recaller.recall(
        RecallRequest(
            guild_id=gw.GUILD, channel_id=gw.CHANNEL, user_id=gw.ALICE, participants=SPEAKERS
        )
    )
    section = next(b for b in result.memory.split("\n\n") if b.startswith(FACT_HEADING))
    fact_lines = [line for line in section.splitlines() if line.startswith("  - ")]
    dates = [m.group(0) for line in fact_lines if (m := _SAID.search(line))]
    spent = sum(len(d) for d in dates)
    undated = [len(_SAID.sub("", line)) + 1 for line in fact_lines]
    mean_line = statistics.mean(undated) if undated else 0
    lines = Settings().max_batch
    dated, plain = _batch_chars(True, lines), _batch_chars(False, lines)
    today = len(TODAY_NOTE.format(today=today_line(1_772_445_600_000, "Europe/Paris")))
    rows: list[tuple[object, ...]] = [
        ("fact lines in the block (table 3b's)", len(fact_lines), ""),
        ("  of which dated", len(dates), ""),
        ("characters their dates take", spent, f"of {len(section):,} in the section"),
        ("  per fact line", round(spent / len(dates), 1) if dates else 0, ""),
        (
            "fact lines that room would hold undated",
            round(spent / mean_line, 1) if mean_line else 0,
            "",
        ),
        (f"batch of {lines} lines, dated (chars)", dated, ""),
        ("  undated (chars)", plain, ""),
        ("  what its dates and zone cost", dated - plain, f"{(dated - plain) / plain:.1%}"),
        ("a current fact's times in the batch (chars)", _known_fact_times(), "FACT_FRAME_TOKENS"),
        ("answer prompt's today line (chars)", today, ""),
    ]
    print_table(
        "3t. What knowing when costs, in characters",
        ["figure", "value", "note"],
        rows,
        [
            "The block's dates take the room its sections left: a date never costs a fact or a",
            "passage in rank order its place. The batch's and the answer prompt's are beside their budgets",
            "(a batch is cut by MEMORY_BATCH_MAX_TOKENS, whose per-line frames LINE_FRAME_TOKENS",
            "and FACT_FRAME_TOKENS count the stamps and times).",
        ],
    )
