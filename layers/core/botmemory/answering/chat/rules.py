"""An offline, deterministic chat model: it answers from the memory block, and nothing else.

It reads the item lines of the `<memory>` block in the system prompt (the `- ` and `  - `
lines recall writes, each carrying stored text as one quoted value), ranks them against the
message being answered with the search's own keyword scoring (botmemory.search.keywords), and
answers with the best one:

    From what I remember: 2023-05-08, "Caroline": "I went to the LGBTQ support group yesterday"

A fact listed under a person (`- "Caroline" (user 1):` then `  - "..."`) is matched with the
person's line too, so a question naming Caroline finds her facts. With no line sharing a
word with the message it says it does not remember anything about that. Stored text is only
ever echoed, between its quotes, as data: nothing in it is read as an instruction.

It calls a tool in exactly two cases, meant for tests and the demo, and only on what the
message being answered says:

- `forget <id>` calls `update_memory(id, "")`;
- `correct <id> to <text>` calls `update_memory(id, text)`;

and only when `<id>` appears in the system prompt as a fact id, `[fact <id>]`, outside any
quoted value (stored text cannot make up an id). Its text is then "": the caller announces
the correction. Handed the call's result (a request ending with a tool turn), it never calls
again and answers from the results alone: what it now remembers, that it forgot, or why it
could not change it. It lets the whole answering path run, be demonstrated and be tested
with no network; it understands nothing, and it says only what the block holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from botmemory.answering.chat.contract import (
    APPLIED,
    UPDATE_MEMORY,
    ChatReply,
    ChatRequest,
    ToolCall,
    ToolResult,
    result_fields,
)
from botmemory.recall.block import BLOCK_FOOTER, BLOCK_HEADER
from botmemory.search.keywords import clip_query, rank
from botmemory.text import clip, quote_for_prompt

ANSWER_PREFIX = "From what I remember: "
NOTHING_REMEMBERED = "I don't remember anything about that."
# The second turn, from a call's result.
NOW_REMEMBERED = "Done: I now remember "
FORGOTTEN = "Done: I no longer remember that."
NOT_CHANGED = "I could not change that: "
UNKNOWN_RESULT = "I could not tell what became of that."
_REASON_CHARS = 200

_BLOCK_OPEN = BLOCK_HEADER.splitlines()[0]  # "<memory>"
# A quoted value as quote_for_prompt writes it: backslash and double quote escaped inside.
_QUOTED_RE = re.compile(r'("(?:[^"\\]|\\.)*")')
_ESCAPE_RE = re.compile(r"\\(.)")
_FACT_ID_RE = re.compile(r"\[fact ([^\]\s]+)\]")
_FACT_MARK_RE = re.compile(r"\s*\[fact [^\]\s]+\]")
_TOP_ITEM = "- "
_NESTED_ITEM = "  - "
_CORRECT_RE = re.compile(r"\bcorrect\s+(\S+)\s+to\s+(\S.*)", re.IGNORECASE | re.DOTALL)
_FORGET_RE = re.compile(r"\bforget\s+(\S+)", re.IGNORECASE)
# An id typed at the end of a sentence: "forget f-12." names f-12.
_TRAILING_PUNCTUATION = ".,;:!?"


@dataclass(frozen=True)
class _Item:
    nested: bool
    shown: str  # what the answer repeats: the line without its dash and fact marks, unescaped
    context: str  # the person line a nested fact sits under, "" otherwise


class RulesChatModel:
    """Answers with the memory line that best matches the message; no network, no state."""

    name = "rules"

    def reply(self, request: ChatRequest) -> ChatReply:
        if request.results:  # its calls were carried out: say what became of them
            return ChatReply(text=" ".join(_said(result) for result in request.results))
        call = _tool_call(request.question, fact_ids(request.system))
        if call is not None:
            return ChatReply(text="", tool_calls=[call])
        return ChatReply(text=_answer(request.question, memory_items(request.system)))


def _said(result: ToolResult) -> str:
    """One result in words; its text only ever quoted."""
    fields = result_fields(result)
    text, reason = fields.get("text"), fields.get("reason")
    if fields.get("status") == APPLIED:
        if fields.get("deleted") is True:
            return FORGOTTEN
        if isinstance(text, str) and text:
            return NOW_REMEMBERED + quote_for_prompt(text) + "."
    elif isinstance(reason, str) and reason:
        return NOT_CHANGED + clip(reason, _REASON_CHARS).rstrip(".") + "."
    return UNKNOWN_RESULT


def _answer(question: str, items: list[_Item]) -> str:
    query, _ = clip_query(question)
    # A person's line with facts under it only introduces them; the facts are what is said.
    candidates = [
        item
        for index, item in enumerate(items)
        if item.nested or index + 1 == len(items) or not items[index + 1].nested
    ]
    if query is None or not candidates:
        return NOTHING_REMEMBERED
    ranked = rank(query, [f"{item.context} {item.shown}" for item in candidates])
    if not ranked:
        return NOTHING_REMEMBERED
    best, _ = ranked[0]
    return ANSWER_PREFIX + candidates[best].shown


def memory_items(system: str) -> list[_Item]:
    """The item lines of every `<memory>` block of the prompt, in order."""
    items: list[_Item] = []
    inside = False
    person = ""
    for line in system.splitlines():
        stripped = line.strip()
        if stripped == _BLOCK_OPEN:
            inside, person = True, ""
        elif stripped == BLOCK_FOOTER:
            inside = False
        elif inside and line.startswith(_NESTED_ITEM):
            items.append(_Item(True, _readable(line[len(_NESTED_ITEM) :]), person))
        elif inside and line.startswith(_TOP_ITEM):
            item = _Item(False, _readable(line[len(_TOP_ITEM) :]), "")
            items.append(item)
            person = item.shown
        else:
            person = ""  # a heading or prose: what follows belongs to no one listed
    return items


def fact_ids(system: str) -> set[str]:
    """The ids the prompt shows as `[fact <id>]`, outside quoted values."""
    ids: set[str] = set()
    for line in system.splitlines():
        for plain in _QUOTED_RE.split(line)[::2]:
            ids.update(_FACT_ID_RE.findall(plain))
    return ids


def _readable(body: str) -> str:
    """An item line as plain text: fact marks dropped, quoted values unescaped (quotes kept)."""
    parts = _QUOTED_RE.split(body)
    for index, part in enumerate(parts):
        # Even parts are the line's own text, odd ones quoted values.
        parts[index] = _ESCAPE_RE.sub(r"\1", part) if index % 2 else _FACT_MARK_RE.sub("", part)
    return " ".join("".join(parts).split())


def _tool_call(question: str, known: set[str]) -> ToolCall | None:
    """`correct <id> to <text>` or `forget <id>`, for an id the prompt showed; else None."""
    correct = _CORRECT_RE.search(question)
    if correct is not None:
        fact_id, text = correct.group(1).rstrip(_TRAILING_PUNCTUATION), correct.group(2).strip()
        if fact_id in known:
            return _update(fact_id, text)
    forget = _FORGET_RE.search(question)
    if forget is not None:
        fact_id = forget.group(1).rstrip(_TRAILING_PUNCTUATION)
        if fact_id in known:
            return _update(fact_id, "")
    return None


def _update(fact_id: str, text: str) -> ToolCall:
    return ToolCall(
        id=f"rules-{UPDATE_MEMORY.name}-1",
        name=UPDATE_MEMORY.name,
        arguments={"id": fact_id, "text": text},
    )
