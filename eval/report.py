"""The evaluation's figures as text: one table per block size, then latency and requests."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence

from eval.dataset import CATEGORIES
from eval.embedding_server import EmbeddingStats
from eval.fold_report import NA, fold_split
from eval.harness import DEFAULT, ConversationReport, QuestionOutcome
from eval.paths import DEPLOYED, HYBRID, KEYWORDS, PATHS, VECTORS

Pick = Callable[[QuestionOutcome], bool]
TARGET_SIZE = "4,000"
# Issue 50's targets at TARGET_SIZE, pooled over the folds: each path's margin over BM25 over
# raw turns with snippets, in points; and its floor, at every size: keyword-only never below.
MARGIN_TARGETS = {KEYWORDS: 5.0, HYBRID: 12.0, DEPLOYED: 12.0}
FLOOR_PATH = KEYWORDS


def percentile(values: Sequence[float], part: float) -> float:
    """The nearest-rank percentile (part in 0..1) of some values; NaN for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(part * len(ordered)))
    return ordered[rank - 1]


def share(questions: Sequence[QuestionOutcome], pick: Pick) -> float:
    """Percent of the questions picked (NaN for none)."""
    if not questions:
        return math.nan
    return 100 * sum(1 for q in questions if pick(q)) / len(questions)


def _rate(questions: Sequence[QuestionOutcome], pick: Pick) -> str:
    value = share(questions, pick)
    return "-" if math.isnan(value) else f"{value:.1f}%"


def paths_of(questions: Sequence[QuestionOutcome]) -> list[str]:
    """The search paths the questions were asked on, in the eval's order."""
    found = {path for q in questions for path in q.cited}
    return [p for p in PATHS if p in found]


def _both(questions: Sequence[QuestionOutcome], path: str, size: str) -> str:
    if not any(size in q.cited.get(path, {}) for q in questions):
        return "-"
    cited = _rate(questions, lambda q: q.cited.get(path, {}).get(size, False))
    held = _rate(questions, lambda q: q.held.get(path, {}).get(size, False))
    return f"{cited} / {held}"


def _row(
    name: str, questions: Sequence[QuestionOutcome], size: str, paths: Sequence[str]
) -> list[str]:
    return [
        name,
        str(len(questions)),
        *(_both(questions, path, size) for path in paths),
        _rate(questions, lambda q: q.loose[size]),
        _rate(questions, lambda q: q.recency[size]),
        _rate(questions, lambda q: q.bm25[size]),
        _rate(questions, lambda q: q.bm25_snippets[size]),
    ]


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(cells[1:], widths[1:], strict=True))
        return "  ".join([first, *rest])

    return [line(header), *(line(r) for r in rows)]


def columns(paths: Sequence[str]) -> list[str]:
    return [
        "category",
        "questions",
        *(f"{path} (cited / held)" for path in paths),
        "+ episode sources",
        "recency window",
        "BM25",
        "BM25 snippets (held)",
    ]


def size_table(questions: Sequence[QuestionOutcome], size: str) -> list[str]:
    """Rows per category and overall for one block size, under a title."""
    paths = paths_of(questions)
    rows = [
        _row(f"{number} {name}", [q for q in questions if q.category == number], size, paths)
        for number, name in CATEGORIES.items()
    ]
    rows.append(_row("overall", questions, size, paths))
    chars = [q.block_chars[size] for q in questions]
    if size == DEFAULT:
        title = (
            "Today's settings (pins 800, facts 1,600, episodes 1,200 characters; 5 facts a "
            "person, 3 episodes; keyword-only); the baselines get each question's block length"
        )
    else:
        title = f"Block of at most {size} characters"
    mean = sum(chars) / len(chars) if chars else 0
    title += f" (keyword-only block: mean {mean:,.0f}, max {max(chars, default=0):,} characters)"
    return [title, *table(columns(paths), rows), *dated_lines(questions, size, paths)]


def dated_lines(questions: Sequence[QuestionOutcome], size: str, paths: Sequence[str]) -> list[str]:
    """For the temporal questions whose answer is a date (eval.dated): how often the block
    shows that date or an evidence turn with its date, beside their cited / held figures."""
    dated = [q for q in questions if q.dated]
    if not dated:
        return []
    figures = []
    for path in paths:
        if not any(size in q.dated.get(path, {}) for q in dated):
            continue
        shown = 100 * sum(q.dated.get(path, {}).get(size, False) for q in dated) / len(dated)
        figures.append(f"{path} {shown:.1f}% (cited / held {_both(dated, path, size)})")
    return [
        f"Temporal questions whose answer is a date ({len(dated)}), the block shows that "
        f"date or the evidence with its date: {'; '.join(figures)}"
    ]


def held_rate(questions: Sequence[QuestionOutcome], path: str, size: str) -> float:
    return share(questions, lambda q: q.held.get(path, {}).get(size, False))


def comparison_lines(questions: Sequence[QuestionOutcome]) -> list[str]:
    """The issue's targets at 4,000 characters, by the strict count, and the gap between
    the deployed path and the embedded hybrid."""
    paths = paths_of(questions)
    figures = {path: held_rate(questions, path, TARGET_SIZE) for path in paths}
    lines = [f"At {TARGET_SIZE} characters, strict (held) count:"]
    for path, target in ((KEYWORDS, 85.0), (HYBRID, 88.0), (DEPLOYED, 85.0)):
        if path in figures:
            mark = "meets" if figures[path] >= target else "below"
            lines.append(f"  {path:<9} {figures[path]:5.1f}%  (target {target:.0f}%: {mark})")
        else:
            lines.append(f"  {path:<9}  not run (no embedding model)")
    bm25 = share(questions, lambda q: q.bm25_snippets[TARGET_SIZE])
    lines.append(
        f"  BM25 with snippets {bm25:5.1f}%, whole turns "
        f"{share(questions, lambda q: q.bm25[TARGET_SIZE]):5.1f}%"
    )
    if VECTORS in figures:
        lines.append(f"  {VECTORS:<9} {figures[VECTORS]:5.1f}%  (S3 Vectors alone, no target)")
    for path in (DEPLOYED, VECTORS):
        if HYBRID in figures and path in figures:
            gap = figures[HYBRID] - figures[path]
            verdict = "within 3 points" if gap <= 3.0 else "more than 3 points behind"
            lines.append(f"  {path} - hybrid: {-gap:+.1f} points ({verdict})")
    return lines


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
        f"{_embedded(stats.index_embedding, stats.query_embedding)}"
    )


def _embedded(index: EmbeddingStats, queries: EmbeddingStats) -> str:
    if not index.texts and not queries.texts:
        return ""
    return (
        f"; embedded {index.texts} passages in {index.model_s:.1f} s, "
        f"{queries.texts} queries in {queries.model_s:.1f} s"
    )


def _per(count: int, seconds: float) -> str:
    return f"{1000 * seconds / count:.1f} ms each" if count else "-"


def embedding_lines(reports: Sequence[ConversationReport]) -> list[str]:
    """What the vector legs cost: the model's time, summed over the conversations."""
    names = sorted({r.stats.embedder for r in reports if r.stats.embedder})
    if not names:
        return ["Embedding: none (keyword-only; the vector paths were not run)."]
    index = [r.stats.index_embedding for r in reports]
    queries = [r.stats.query_embedding for r in reports]
    texts, seconds = sum(e.texts for e in index), sum(e.model_s for e in index)
    asked, asked_s = sum(e.texts for e in queries), sum(e.model_s for e in queries)
    return [
        f"Embedding ({', '.join(names)}), time inside the model, summed over the processes:",
        f"  passages at indexing: {texts:,} texts in {seconds:.1f} s ({_per(texts, seconds)})",
        f"  questions at recall: {asked:,} texts in {asked_s:.1f} s ({_per(asked, asked_s)}; "
        "each question embedded once, its other searches served from the server's cache)",
    ]


def _statuses(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "none"


def margin(questions: Sequence[QuestionOutcome], path: str, size: str) -> float | None:
    """The path's strict figure minus BM25's (raw turns, snippets), in points; None when
    there is no question to count."""
    if not questions:
        return None
    held = sum(q.held.get(path, {}).get(size, False) for q in questions)
    bm25 = sum(q.bm25_snippets.get(size, False) for q in questions)
    return 100 * (held - bm25) / len(questions)


def _points(value: float | None) -> str:
    return NA if value is None else f"{value:+.1f}"


def margin_lines(questions: Sequence[QuestionOutcome], sizes: Sequence[str]) -> list[str]:
    """Each path's margin over BM25 with snippets, pooled and per fold of two conversations
    (in the dataset's order, as `--folds` splits them), at each block size; then the
    targets (at TARGET_SIZE) and the keyword-only floor (at every size), pooled."""
    conversations = list(dict.fromkeys(q.conversation for q in questions))
    folds = fold_split(conversations)
    by_fold = [[q for q in questions if q.conversation in fold] for fold in folds]
    header = ["path", "size", "pooled", *(", ".join(f) for f in folds)]
    rows = [
        [path, size, _points(margin(questions, path, size))]
        + [_points(margin(asked, path, size)) for asked in by_fold]
        for path in paths_of(questions)
        for size in sizes
        if size != DEFAULT
    ]
    lines = [
        "Margin over BM25 (raw turns, snippets, the same block length), strict, in points: "
        "pooled and per fold",
        *table(header, rows),
    ]
    for path, target in MARGIN_TARGETS.items():
        if path not in paths_of(questions) or TARGET_SIZE not in sizes:
            continue
        value = margin(questions, path, TARGET_SIZE)
        mark = "meets" if value is not None and value >= target else "below"
        lines.append(f"  {path} at {TARGET_SIZE}: {_points(value)} (target +{target:.0f}: {mark})")
    floor = [margin(questions, FLOOR_PATH, s) for s in sizes if s != DEFAULT]
    held = all(value is not None and value >= 0 for value in floor)
    lines.append(
        f"  floor, {FLOOR_PATH} never below BM25 at any size: "
        f"{'holds' if held else 'does not hold'} ({', '.join(_points(v) for v in floor)})"
    )
    return lines


def render(reports: Sequence[ConversationReport], sizes: Sequence[str]) -> list[str]:
    questions = [q for r in reports for q in r.questions]
    lines: list[str] = []
    for size in sizes:
        lines += [*size_table(questions, size), ""]
    if TARGET_SIZE in sizes:
        lines += [*comparison_lines(questions), ""]
    lines += [*margin_lines(questions, sizes), ""]
    lines += [*embedding_lines(reports), ""]
    lines += latency_lines(reports, sizes)
    return lines


def language_lines(reports: Sequence[ConversationReport], sizes: Sequence[str]) -> list[str]:
    """The multilingual set: per language and path, the strict (held) hit rate at each size."""
    questions = [q for r in reports for q in r.questions]
    paths = paths_of(questions)
    header = ["language", "questions", *(f"{p} {s}" for p in paths for s in sizes)]
    rows = [
        [
            report.sample_id,
            str(len(report.questions)),
            *(f"{held_rate(report.questions, p, s):.1f}%" for p in paths for s in sizes),
        ]
        for report in reports
    ]
    return table(header, rows)
