"""The evaluation's figures as text: one table per block size, then latency and requests."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from eval.dataset import CATEGORIES
from eval.harness import DEFAULT, ConversationReport, QuestionOutcome

COLUMNS = ("questions", "this system", "+ episode sources", "recency window", "BM25")
Pick = Callable[[QuestionOutcome], bool]


def percentile(values: Sequence[float], share: float) -> float:
    """The nearest-rank percentile (share in 0..1) of some values; NaN for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(share * len(ordered)))
    return ordered[rank - 1]


def _rate(questions: Sequence[QuestionOutcome], pick: Pick) -> str:
    if not questions:
        return "-"
    return f"{100 * sum(1 for q in questions if pick(q)) / len(questions):.1f}%"


def _row(name: str, questions: Sequence[QuestionOutcome], size: str) -> list[str]:
    return [
        name,
        str(len(questions)),
        _rate(questions, lambda q: q.system[size]),
        _rate(questions, lambda q: q.loose[size]),
        _rate(questions, lambda q: q.recency[size]),
        _rate(questions, lambda q: q.bm25[size]),
    ]


def _table(rows: list[list[str]]) -> list[str]:
    header = ["category", *COLUMNS]
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    return [line(header), *(line(r) for r in rows)]


def size_table(questions: Sequence[QuestionOutcome], size: str) -> list[str]:
    """Rows per category and overall for one block size, under a title."""
    rows = [
        _row(f"{number} {name}", [q for q in questions if q.category == number], size)
        for number, name in CATEGORIES.items()
    ]
    rows.append(_row("overall", questions, size))
    chars = [q.block_chars[size] for q in questions]
    if size == DEFAULT:
        title = (
            "Today's settings (pins 800, facts 1,600, episodes 1,200 characters; 5 facts a "
            "person, 3 episodes); the baselines get each question's block length"
        )
    else:
        title = f"Block of at most {size} characters"
    mean = sum(chars) / len(chars) if chars else 0
    title += f" (this system's block: mean {mean:,.0f}, max {max(chars, default=0):,} characters)"
    return [title, *_table(rows)]


def latency_lines(reports: Iterable[ConversationReport], sizes: Sequence[str]) -> list[str]:
    reports = list(reports)
    lines = ["Recall, in process against the local stack (moto), per block size:"]
    all_ms: list[float] = []
    all_requests: list[int] = []
    for size in sizes:
        ms = [v for r in reports for v in r.latencies_ms[size]]
        requests = [v for r in reports for v in r.requests[size]]
        all_ms += ms
        all_requests += requests
        lines.append(_latency(size, ms, requests))
    lines.append(_latency("all", all_ms, all_requests))
    return lines


def _latency(size: str, ms: Sequence[float], requests: Sequence[int]) -> str:
    mean = sum(requests) / len(requests) if requests else math.nan
    spread = f" ({min(requests)}-{max(requests)})" if requests else ""
    return (
        f"  {size:>6}: {len(ms):>5} recalls, p50 {percentile(ms, 0.5):6.1f} ms, "
        f"p95 {percentile(ms, 0.95):6.1f} ms, DynamoDB requests per recall {mean:.2f}{spread}"
    )


def conversation_line(report: ConversationReport) -> str:
    stats = report.stats
    skipped = f" (+{report.unanswerable} without evidence)" if report.unanswerable else ""
    return (
        f"  {report.sample_id} ({' & '.join(report.speakers)}): {stats.turns} turns, "
        f"{len(report.questions)} questions{skipped}; {stats.rounds} consolidations, "
        f"{stats.sweeps} sweeps, {stats.facts} facts written, {stats.episodes} episodes kept, "
        f"{stats.passages} passages indexed; replay {stats.replay_s:.1f} s, "
        f"recall {stats.recall_s:.1f} s; searches {_statuses(stats.search)}"
    )


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"


def render(reports: Sequence[ConversationReport], sizes: Sequence[str]) -> list[str]:
    questions = [q for r in reports for q in r.questions]
    lines: list[str] = []
    for size in sizes:
        lines += [*size_table(questions, size), ""]
    lines += latency_lines(reports, sizes)
    return lines
