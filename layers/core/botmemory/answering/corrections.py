"""Corrections by the chat model: its one tool, `update_memory(id, text)`, in the open.

New text corrects a fact, empty text deletes it. A call changes something only when:
- the id is one of the facts shown in that prompt (`shown`), and the fact as stored now
  (read again, strongly consistent: the prompt's copy is never trusted) still exists, is
  active, unexpired, in this scope, and is not about the bot itself;
- for an update, the new text is what any stored fact text must be (scrubbed, capped at
  MEMORY_FACT_CHARS, no pings, no markup or memory-block headings), and its subject has not
  opted out or is being erased (a deletion is always allowed: it only forgets).
Anything else, malformed arguments included, is a `Refusal` and changes nothing.

An applied correction keeps the fact's id and evidence; its source becomes `model`
(`FactSource.MODEL`), a fact the person wrote stays `manually_written` (the hot tier keeps
it), its new words are indexed again under the same passage id (their old ones go with
them), its retention starts again, and the change is kept as a history
entry (actor `model`, with the id of the person the bot was answering) in the same
transaction, which also checks that the fact is still exactly what was read. A deletion
leaves a forget tombstone, so consolidation does not bring the fact back from words said
before it. Every applied correction is announced in the channel (`correction_notice`),
and every refused one too (`refusal_notice`), so that an answer never reads as if a
change was made that the table refused (the fact changed or went meanwhile, its subject
is being erased).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from botmemory.clock import DAY_MS, epoch_seconds, ttl_alive
from botmemory.memory import fact_history
from botmemory.memory.behaviour import behaviour_request
from botmemory.memory.hot_tier import protected
from botmemory.memory.personas import may_change
from botmemory.memory.visibility import Where
from botmemory.people.retention import Kept
from botmemory.recall.block import SECTION_HEADINGS
from botmemory.records import (
    Fact,
    FactChange,
    FactSource,
    FactStatus,
    Forgotten,
    HistoryActor,
)
from botmemory.search.index_sync import IndexWriter, reindex_fact
from botmemory.text import as_discord_text, clip, has_pings, markup_in, normalized, scrub

if TYPE_CHECKING:  # runtime builds the answerer, which imports this module
    from botmemory.services import MemoryServices

log = logging.getLogger(__name__)

# The tool's argument names, as the chat model's tool schema declares them.
ARGUMENT_ID = "id"
ARGUMENT_TEXT = "text"
# Arguments longer than this are refused unread: no fact id or fact text comes near it.
MAX_ID_CHARS = 64
MAX_TEXT_CHARS = 2000
# How much of a text a notice quotes.
NOTICE_TEXT_CHARS = 300


class Correction(BaseModel):
    """A correction applied: the fact's text before, and after (None: deleted)."""

    fact_id: str
    old: str
    new: str | None  # None = deleted
    user_id: str = ""  # the fact's subject
    # Its new words in the search index: None when search is off or it was deleted.
    indexed: bool | None = None


class Refusal(BaseModel):
    """A call that changed nothing, and why (for logs and the model's next turn)."""

    fact_id: str
    reason: str


def _arguments(arguments: Any) -> tuple[str, str] | Refusal:
    """The id and the raw text of a call, or why they are malformed."""
    if not isinstance(arguments, dict):
        return Refusal(fact_id="", reason="arguments are not an object")
    fact_id = arguments.get(ARGUMENT_ID)
    if not isinstance(fact_id, str) or not fact_id.strip():
        return Refusal(fact_id="", reason="missing fact id")
    if len(fact_id) > MAX_ID_CHARS:
        return Refusal(fact_id=fact_id[:MAX_ID_CHARS], reason="fact id too long")
    fact_id = fact_id.strip().lower()
    text = arguments.get(ARGUMENT_TEXT, None)
    if not isinstance(text, str):
        return Refusal(fact_id=fact_id, reason="text must be a string (empty to delete)")
    if len(text) > MAX_TEXT_CHARS:
        return Refusal(fact_id=fact_id, reason=f"text longer than {MAX_TEXT_CHARS} characters")
    return fact_id, text


def _new_text(raw: str, limit: int) -> str | Refusal:
    """A correction's text, cleaned as stored fact text is; "" asks for a deletion."""
    if not raw.strip():
        return ""
    text = clip(scrub(raw), limit)
    if not text:  # only invisible or control characters: not a request to delete
        return Refusal(fact_id="", reason="text is empty once invisible characters are removed")
    if has_pings(text):
        return Refusal(fact_id="", reason="text mentions someone or @everyone/@here")
    markup = markup_in(text, SECTION_HEADINGS)
    if markup is not None:
        return Refusal(fact_id="", reason=f"text holds {markup}")
    request = behaviour_request(text)
    if request:  # a fact rewritten into an instruction to the bot is no fact
        return Refusal(fact_id="", reason=f"text is a {request}")
    return text


def _stored(
    services: MemoryServices,
    fact_id: str,
    shown: dict[str, Fact],
    scope: str,
    lineage_id: str | None,
) -> Fact | str:
    """The fact as stored now, or why it cannot be corrected: one of this server's, and when
    a persona holds it, the answering persona's lineage (botmemory.memory.personas.may_change)."""
    seen = shown.get(fact_id)
    if seen is None:
        return "not a fact shown in this conversation"
    if not may_change(seen, scope, lineage_id):
        return "not a fact of this server, or another persona's"
    stored = services.repository.fact(seen.scope, seen.user_id, fact_id)
    if stored is None or stored.scope != seen.scope:
        return "no such fact any more"
    if stored.status != FactStatus.ACTIVE or not ttl_alive(
        stored.expires_at, services.clock.now_ms()
    ):
        return "the fact is no longer active"
    return stored


def apply_update_memory(
    services: MemoryServices,
    arguments: dict[str, Any],
    *,
    shown: dict[str, Fact],
    scope: str,
    bot_user_id: str | None,
    actor_id: str | None,
    lineage_id: str | None = None,
    learned: Where | None = None,
) -> Correction | Refusal:
    """Apply one `update_memory` call of the chat model, or refuse it (module docstring).

    `shown`: the facts that were in that prompt, by id; `actor_id`: the person the bot was
    answering, kept in the history entry; `lineage_id`: the answering persona's (None: no
    persona), the only persona whose facts the call may change; `learned`: where the
    conversation is (visibility.learned_where), which a corrected text is then shown by: its
    words come from this conversation, not from where the old text was learned."""
    parsed = _arguments(arguments)
    if isinstance(parsed, Refusal):
        return parsed
    fact_id, raw = parsed
    stored = _stored(services, fact_id, shown, scope, lineage_id)
    if isinstance(stored, str):
        return Refusal(fact_id=fact_id, reason=stored)
    if bot_user_id and stored.user_id == bot_user_id:
        return Refusal(fact_id=fact_id, reason="facts about the bot itself are not corrected")
    settings = services.settings
    text = _new_text(raw, settings.fact_chars)
    if isinstance(text, Refusal):
        return text.model_copy(update={"fact_id": fact_id})
    if text and normalized(text) == normalized(stored.text):
        return Refusal(fact_id=fact_id, reason="the text is unchanged")
    opt_outs = services.opt_outs
    if text and opt_outs.barred([stored.user_id]):
        return Refusal(fact_id=fact_id, reason="its subject opted out: only a deletion is allowed")

    now = services.clock.now_ms()
    retention = services.retention.days_of(stored.scope, Kept.FACTS)
    expires = epoch_seconds(now + retention * DAY_MS)
    corrected: Fact | None = None
    tombstone: Forgotten | None = None
    if text:
        corrected = stored.model_copy(
            update={
                "text": text,
                "source": FactSource.MODEL,
                # What a person wrote stays theirs for the hot tier, whoever corrects it.
                "manually_written": protected(stored),
                "updated_ms": now,
                "expires_at": expires,
                **(learned.fields() if learned else {}),
            }
        )
        entry = fact_history.history_entry(
            stored,
            FactChange.UPDATED,
            actor=HistoryActor.MODEL,
            at_ms=now,
            retention_days=retention,
            old=stored.text,
            new=text,
            actor_id=actor_id,
        )
    else:
        tombstone = Forgotten(
            scope=stored.scope,
            user_id=stored.user_id,
            fact_id=stored.fact_id,
            forgotten_ms=now,
            expires_at=expires,
        )
        entry = fact_history.deleted(
            stored,
            actor=HistoryActor.MODEL,
            at_ms=now,
            retention_days=retention,
            actor_id=actor_id,
        )
    applied = services.repository.correct_fact(
        stored,
        corrected,
        entry,
        person_hash=opt_outs.hash_of(stored.user_id),
        now_ms=now,
        tombstone=tombstone,
    )
    if not applied:
        return Refusal(
            fact_id=fact_id,
            reason="the fact changed meanwhile, or its subject is being erased or opted out",
        )
    indexed = _reindex(services, corrected) if corrected is not None else None
    return Correction(
        fact_id=fact_id,
        old=stored.text,
        new=text or None,
        user_id=stored.user_id,
        indexed=indexed,
    )


def _reindex(services: MemoryServices, corrected: Fact) -> bool | None:
    """The corrected words to the search index, through the writer consolidation uses
    (botmemory.search.index_sync.reindex_fact); a deletion needs nothing here (the stream
    removes its passage). None: search is off; False: the index failed (logged), the
    correction stands and its old words are out of the index."""
    index = services.search_index
    if index is None:
        return None
    repository = services.repository
    name = repository.display_names(corrected.scope, [corrected.user_id]).get(corrected.user_id)
    try:
        reindex_fact(IndexWriter(index, repository, services.clock), corrected, name)
    except Exception as exc:  # the index is never a reason to undo a correction
        log.warning(
            "corrected fact not indexed",
            extra={"fact_id": corrected.fact_id, "error": repr(exc)[:300]},
        )
        return False
    return True


def _quoted(text: str) -> str:
    return '"' + as_discord_text(clip(scrub(text), NOTICE_TEXT_CHARS)) + '"'


def correction_notice(correction: Correction, owner_name: str) -> str:
    """The short message posted in the channel, showing what changed. Stored text and the
    name are shown as text (markup escaped, mentions defused); post it with
    `allowed_mentions: {"parse": []}` all the same."""
    name = as_discord_text(clip(scrub(owner_name), 80)) or "someone"
    if correction.new is None:
        return f"I forgot what I remembered about {name}: {_quoted(correction.old)}"
    return (
        f"I corrected what I remember about {name}: "
        f"{_quoted(correction.old)} → {_quoted(correction.new)}"
    )


def refusal_notice(refusal: Refusal, fact: Fact | None, owner_name: str) -> str:
    """The short message posted when a correction changed nothing: which fact (when the
    prompt showed it) and why, so the answer never reads as if it were done."""
    name = as_discord_text(clip(scrub(owner_name), 80)) or "someone"
    which = f" {_quoted(fact.text)}" if fact is not None else ""
    reason = as_discord_text(clip(scrub(refusal.reason), NOTICE_TEXT_CHARS))
    return f"I did not change what I remember about {name}{which}: {reason}."
