"""How the commands show what is kept: one line per fact, history entry or quarantined
batch, stored text shown as text (`shown`), lines cut to what one Discord message holds
(`listing`), and the staff view of one member (`user_facts_listing`)."""

from __future__ import annotations

from datetime import UTC, tzinfo

from botmemory.clock import day, moment, ttl_alive
from botmemory.memory.visibility import place_label
from botmemory.records import Fact, FactChange, FactHistory, FactStatus, HistoryActor, Quarantine
from botmemory.services import MemoryServices
from botmemory.storage.keys import message_of
from botmemory.text import as_discord_text, scrub
from botmemory.when.facts import is_past
from botmemory.when.zones import local_day, zone_of

MAX_LISTED = 25


def shown(text: str) -> str:
    """A stored string as a Discord message shows it: one line, markup and mentions defused."""
    return as_discord_text(scrub(text))


def fact_line(fact: Fact) -> str:
    return (
        f"`{fact.fact_id}` {shown(fact.text)} ({fact.kind.value}, {fact.source.value}, "
        f"{day(fact.updated_ms)}; {place_label(fact)})"
    )


def quarantine_line(record: Quarantine) -> str:
    messages = sorted({m for sk in record.observation_sks if (m := message_of(sk))}, key=int)
    authors = ", ".join(f"<@{u}>" for u in record.user_ids) or "no author"
    return (
        f"`{record.quarantine_id}` {day(record.quarantined_ms)}: "
        f"{len(record.observation_sks)} observation(s) by {authors}"
        + (f", message {', '.join(messages)}" if messages else "")
        + f"; after {record.attempts} attempts: {shown(record.error)}"
    )


def listing(header: str, lines: list[str]) -> str:
    """Lines under a header, cut to what one Discord message holds."""
    text = header
    for done, line in enumerate(lines):
        if len(text) + len(line) + 40 > 2000:
            return text + f"\n… and {len(lines) - done} more."
        text += "\n" + line
    return text


_CHANGE_WORDS = {
    FactChange.CREATED: "created",
    FactChange.UPDATED: "changed",
    FactChange.RESTORED: "restated",
    FactChange.SUPERSEDED: "superseded",
    FactChange.DEMOTED: "demoted",
    FactChange.DELETED: "deleted",
}


def history_line(entry: FactHistory) -> str:
    """One change to a fact: when, who, what, with its texts shown as text."""
    who = entry.actor.value + (f" <@{entry.actor_id}>" if entry.actor_id else "")
    old = f'"{shown(entry.old)}"' if entry.old is not None else ""
    new = f'"{shown(entry.new)}"' if entry.new is not None else ""
    what = " → ".join(t for t in (old, new) if t)
    if entry.change == FactChange.SUPERSEDED and entry.superseded_by:
        what += f" (by `{entry.superseded_by}`)"
    word = _CHANGE_WORDS[entry.change]
    if entry.change == FactChange.RESTORED and entry.actor == HistoryActor.STAFF:
        word = "restored"  # `/memory-staff restore-fact`, not a restatement
    return f"{moment(entry.at_ms)}, {who}: {word} {what}".rstrip()


def status_mark(fact: Fact, now_ms: int | None = None, zone: tzinfo = UTC) -> str:
    """How a listing marks a fact recall does not show: demoted, superseded, or (active)
    past the last day it held (botmemory.when.facts), with that day in the server's zone."""
    if fact.status != FactStatus.ACTIVE:
        return f" [{fact.status.value}]"
    if now_ms is not None and fact.valid_until_ms is not None and is_past(fact, now_ms):
        # It ends at the midnight after its last day: the millisecond before is that day.
        return f" [past: held until {local_day(fact.valid_until_ms - 1, zone)}]"
    return ""


def zone_for(services: MemoryServices, scope: str, facts: list[Fact]) -> tzinfo:
    """The zone a listing of these facts dates their last days in: the server's, read only
    when one of them has a last day (UTC otherwise, and in direct messages)."""
    if not any(f.valid_until_ms is not None for f in facts):
        return UTC
    return zone_of(services.repository.server_zone(scope))


def user_facts_listing(services: MemoryServices, scope: str, user_id: str) -> str:
    """Every fact kept about a member in a scope, with ids: active first, then demoted
    (`/memory-staff restore-fact` brings one back), then superseded. What
    `/memory-staff user` answers; local runs show it too."""
    now = services.clock.now_ms()
    facts = [
        f for f in services.repository.all_facts(scope, user_id) if ttl_alive(f.expires_at, now)
    ]
    if not facts:
        return f"I keep no facts about <@{user_id}> in this server."
    facts.sort(
        key=lambda f: (
            f.status != FactStatus.ACTIVE,
            f.status == FactStatus.SUPERSEDED,
            -f.updated_ms,
        )
    )
    zone = zone_for(services, scope, facts)
    lines = [fact_line(f) + status_mark(f, now, zone) for f in facts]
    return listing(f"Facts about <@{user_id}> ({len(facts)}):", lines)
