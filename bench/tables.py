"""Printing the bench's tables: aligned columns, formatted figures, ratios."""

from __future__ import annotations

from collections.abc import Sequence

MILLION = 1_000_000
GB = 1024**3

# Printing ------------------------------------------------------------------------------


def fmt(value: object) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.2f}"


def ratio(left: float, right: float) -> str:
    if left == 0:
        return "1.00x" if right == 0 else "n/a"
    return f"{right / left:,.2f}x"


def print_table(
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[object]],
    notes: Sequence[str] = (),
) -> None:
    cells = [list(columns)] + [[fmt(v) for v in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]

    def line(row: Sequence[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
        return "  ".join([first, *rest]).rstrip()

    print(title)
    print("=" * len(title))
    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))
    for note in notes:
        print(f"  {note}")
    print()


def compared(rows: Sequence[tuple[str, float, float]]) -> list[tuple[object, ...]]:
    return [(label, left, right, ratio(left, right)) for label, left, right in rows]
