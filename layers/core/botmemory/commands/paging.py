"""A long answer in pages with buttons (`/memory show`), instead of one message cut short.

The pages are cut at line ends within one message's room; the buttons carry the page to show
(`SHOW_PAGE` + its number). A button re-reads what it shows for whoever presses it (an
ephemeral message's buttons are its owner's), so a page is never stale nor someone else's.
"""

from __future__ import annotations

from typing import Any

from botmemory.commands.invocation import ephemeral_reply, webhook_edit
from botmemory.discord.interactions import (
    MAX_CONTENT,
    ButtonStyle,
    ComponentType,
    InteractionResponseType,
)

SHOW_PAGE = "memshow:page:"
# Room left on each page for its "page n of m" line.
_FOOTER_ROOM = 40


def pages_of(text: str, limit: int = MAX_CONTENT - _FOOTER_ROOM) -> list[str]:
    """The text cut into pages at line ends (a line longer than a page is cut itself)."""
    pages: list[str] = []
    current = ""
    for line in text.split("\n"):
        while len(line) > limit:
            pages += [current] if current else []
            pages.append(line[:limit])
            current, line = "", line[limit:]
        candidate = f"{current}\n{line}" if current else line
        if len(candidate) > limit:
            pages.append(current)
            candidate = line
        current = candidate
    return [*pages, current] if current or not pages else pages


def page_number(custom_id: str) -> int:
    """The page a button asks for (0-based); 0 for anything unreadable."""
    raw = custom_id.removeprefix(SHOW_PAGE)
    return int(raw) if raw.isdigit() and len(raw) < 6 else 0


def paged(text: str, page: int, *, pressed: bool) -> dict[str, Any]:
    """Page `page` of `text`, with the buttons to the others (none for one page); an answer
    to a command, or (`pressed`) the update of the message whose button was pressed."""
    pages = pages_of(text)
    page = min(max(page, 0), len(pages) - 1)
    content = pages[page]
    components: list[dict[str, Any]] | None = None
    if len(pages) > 1:
        content += f"\n-# page {page + 1} of {len(pages)}"
        components = [_buttons(page, len(pages))]
    if not pressed:
        return ephemeral_reply(content, components=components)
    return {
        "type": InteractionResponseType.UPDATE_MESSAGE,
        "data": webhook_edit(content, components=components or []),
    }


def _buttons(page: int, total: int) -> dict[str, Any]:
    def button(label: str, target: int, disabled: bool) -> dict[str, Any]:
        return {
            "type": ComponentType.BUTTON,
            "style": ButtonStyle.SECONDARY,
            "label": label,
            "custom_id": f"{SHOW_PAGE}{target}",
            "disabled": disabled,
        }

    return {
        "type": ComponentType.ACTION_ROW,
        "components": [
            button("‹ Previous", page - 1, page == 0),
            button("Next ›", page + 1, page == total - 1),
        ],
    }
