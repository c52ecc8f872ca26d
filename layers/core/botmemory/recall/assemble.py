"""The memory block built from what recall read, each section within its own character
budget (botmemory.recall.block): the passages search found (first, where a model attends
most), pins, the notes for direct messages (in one only), the channel summary, the facts by
tier, the other channels lately and the episodes; or, with memory off, the channel's legacy notes.

Stored text is data (docs/architecture.md, invariant 11): every stored string enters the block only as
`quote_for_prompt` makes it, one quoted, escaped value that never starts a line and holds no
angle bracket. Only the block's own lines start a line: the markers, the headings and the
`- ` items that carry the quoted values. Budgets are measured on those emitted lines.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import tzinfo

from botmemory.memory.notes import Note
from botmemory.memory.short_term import LINE_CHARS, RecentElsewhere
from botmemory.recall.block import (
    BLOCK_FOOTER,
    BLOCK_HEADER,
    ELSEWHERE_HEADING,
    EPISODE_HEADING,
    FACT_HEADING,
    LEGACY_HEADING,
    NAME_CHARS,
    NOTES_HEADING,
    PASSAGE_HEADING,
    PERSONA_KNOWLEDGE_LINE,
    PIN_HEADING,
    SUMMARY_HEADING,
    Section,
    fill_template,
)
from botmemory.recall.contract import (
    RecalledElsewhere,
    RecalledEpisode,
    RecalledFact,
    RecalledNote,
    RecalledPassage,
    RecalledPersona,
    RecalledPin,
    RecalledSummary,
    RecallRequest,
    RecallResult,
)
from botmemory.recall.search_leg import (
    FoundMessage,
    RankedEpisodes,
    RankedFacts,
    query_snippet,
)
from botmemory.records import ChannelSummary, Episode, Fact, Persona, Pin
from botmemory.search import rules
from botmemory.search.keywords import tokens
from botmemory.settings.config import Settings
from botmemory.storage import keys
from botmemory.text import clip, quote_for_prompt, scrub
from botmemory.when.facts import said_label
from botmemory.when.zones import DEFAULT_ZONE, label, local_day, local_minute, zone_of

# Where a summary too long for its budget is cut: between sentences, its oldest first.
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def assemble(
    settings: Settings,
    request: RecallRequest,
    pins: list[Pin],
    summary: ChannelSummary | None,
    tiers: list[RankedFacts],
    elsewhere: list[RecentElsewhere],
    messages: list[FoundMessage],
    episodes: RankedEpisodes,
    names: dict[str, str],
    persona: Persona | None = None,
    notes: list[Note] | None = None,
    zone: str = DEFAULT_ZONE,
) -> RecallResult:
    """The block and what it shows, each section within its budget; every date in `zone`
    (the server's, botmemory.when), which the result names and the answer prompt states."""
    tz = zone_of(zone)
    pin_section = Section(PIN_HEADING, settings.recall_pin_chars)
    shown_pins = [
        RecalledPin(id=p.pin_id, target=p.target, text=_line(p.text))
        for p in pins
        if pin_section.add(f"- {quote_for_prompt(p.text)}")
    ]
    notes_section = Section(NOTES_HEADING, settings.recall_notes_chars)
    shown_notes = _note_lines(notes_section, notes or [])
    summary_section = Section(SUMMARY_HEADING, settings.recall_summary_chars)
    shown_summary = _summary_line(summary_section, summary) if summary else None
    fact_section = Section(FACT_HEADING, settings.recall_fact_chars)
    keeps = not rules.current().passages_take_spare
    facts_at = _FactsAt(settings.recall_fact_chars, names, persona, tz, keeps)
    first = [tier.first for tier in tiers]
    # Facts are chosen and placed undated: their dates come after the passages (below).
    chosen = _chosen_facts(fact_section, first, names, persona)
    shown_facts, dated = _fact_lines(fact_section, chosen, names, persona)
    elsewhere_section = Section(ELSEWHERE_HEADING, settings.recall_short_term_chars)
    shown_elsewhere = _elsewhere_lines(elsewhere_section, elsewhere, names, tz)
    episode_section = Section(EPISODE_HEADING, settings.recall_episode_chars)
    shown_episodes = _episode_lines(episode_section, episodes.first, tz)
    # Passages are what a query needs most: they also get the room facts and episodes
    # left unused, so the block is never larger than the sum of the budgets.
    spare = fact_section.unused() + episode_section.unused()
    if not rules.current().passages_take_spare:
        spare = 0
    passage_section = Section(PASSAGE_HEADING, settings.recall_search_chars + spare)
    # The dates of the facts the query is about are kept room before the passages that only
    # fill what the best ones left (those after the first that did not fit), never before
    # those: at small budgets the passages in rank order carry most answers, and are dated.
    reserve = sum(len(_fact_line(f, tz)) - len(_fact_line(f)) for f in chosen.order)
    shown_passages = (
        _passage_lines(passage_section, messages, request.query, tz, reserve) if messages else []
    )
    left = passage_section.unused()
    fact_section, shown_facts, dated, left = _dated(fact_section, chosen, dated, left, facts_at)
    # What the query is not about (a person's most used facts, the latest episode) gets the
    # room left, each section within its own budget: the sum still holds.
    if_room = [tier.if_room for tier in tiers if tier.if_room]
    if if_room:
        before = fact_section.size()
        fact_section = Section(FACT_HEADING, min(settings.recall_fact_chars, before + left))
        chosen = _chosen_facts(fact_section, first + if_room, names, persona, dated)
        shown_facts, dated = _fact_lines(fact_section, chosen, names, persona, tz, dated, False)
        left -= fact_section.size() - before
    if episodes.if_room:
        before = episode_section.size()
        episode_section = Section(
            EPISODE_HEADING, min(settings.recall_episode_chars, before + left)
        )
        shown_episodes = _episode_lines(episode_section, episodes.all(), tz)
        left -= episode_section.size() - before
    # Last, the other facts' dates, in what is left.
    fact_section, shown_facts, dated, left = _dated(fact_section, chosen, dated, left, facts_at)
    # What search found for this very message opens the block: models attend most to the
    # start (and the end) of a long prompt, least to its middle.
    sections = [
        s.text()
        for s in (
            passage_section,
            pin_section,
            notes_section,
            summary_section,
            fact_section,
            elsewhere_section,
            episode_section,
        )
        if s.lines
    ]
    memory = "\n\n".join([BLOCK_HEADER, *sections, BLOCK_FOOTER]) if sections else ""
    return RecallResult(
        memory=memory,
        system_prompt=fill_template(request.template, memory),
        pins=shown_pins,
        summary=shown_summary,
        facts=shown_facts,
        elsewhere=shown_elsewhere,
        persona=RecalledPersona(
            id=persona.persona_id, name=_line(persona.name), lineage=persona.lineage_id
        )
        if persona
        else None,
        passages=[_recalled_passage(m) for m in shown_passages],
        episodes=shown_episodes,
        notes=shown_notes,
        enabled=True,
        zone=label(zone),
    )


def assemble_legacy(settings: Settings, request: RecallRequest, legacy: str | None) -> RecallResult:
    """Memory off: the channel's legacy memory string, read-only."""
    section = Section(LEGACY_HEADING, settings.recall_episode_chars)
    _quoted_lines(section, legacy or "")
    memory = "\n\n".join([BLOCK_HEADER, section.text(), BLOCK_FOOTER]) if section.lines else ""
    return RecallResult(
        memory=memory, system_prompt=fill_template(request.template, memory), enabled=False
    )


def _quoted_lines(section: Section, text: str) -> tuple[list[str], bool]:
    """A stored text of several lines as item lines, one quoted value each, while they fit;
    the first line that does not is cut to the room left and ends it. The lines shown
    (scrubbed), and whether all of them were."""
    shown: list[str] = []
    for line in scrub(text, keep_newlines=True).splitlines():
        if section.add(f"- {quote_for_prompt(line)}"):
            shown.append(line)
            continue
        room = section.room() - len("- ")
        if room >= len('"x…"'):
            section.add(f"- {quote_for_prompt(line, limit=room)}")
            shown.append(clip(line, room - 2))
        return shown, False
    return shown, True


def _note_lines(section: Section, notes: list[Note]) -> list[RecalledNote]:
    """The notes for direct messages, in order (the deployment's first), while they fit."""
    shown: list[RecalledNote] = []
    for note in notes:
        lines, whole = _quoted_lines(section, note.text)
        if lines:
            shown.append(RecalledNote(guild_id=note.guild_id, text="\n".join(lines)))
        if not whole:
            break
    return shown


def _episode_lines(
    section: Section, episodes: list[Episode], zone: tzinfo
) -> list[RecalledEpisode]:
    """`- 2023-05-08: "..."`, in order, while they fit."""
    return [
        RecalledEpisode(
            id=e.episode_id,
            summary=_line(e.summary),
            participants=e.participant_ids,
            start_ms=e.start_ms,
            end_ms=e.end_ms,
        )
        for e in episodes
        if section.add(f"- {local_day(e.end_ms, zone)}: {quote_for_prompt(e.summary)}")
    ]


@dataclass
class _Chosen:
    """The facts a section shows, by subject in the order they are shown, and in the order
    they were chosen (their tiers' priority)."""

    subjects: dict[str, list[Fact]] = field(default_factory=dict)
    order: list[Fact] = field(default_factory=list)


@dataclass
class _Dates:
    """The facts dated so far, and the characters their dates take."""

    ids: set[str] = field(default_factory=set)
    chars: int = 0


@dataclass(frozen=True)
class _FactsAt:
    """What re-making the facts section takes: its budget, who is who, the zone."""

    budget: int
    names: dict[str, str]
    persona: Persona | None
    zone: tzinfo
    keeps_unused: bool = False  # its unused room was not given to the passages


def _dated(
    section: Section, chosen: _Chosen, dated: _Dates, left: int, at: _FactsAt
) -> tuple[Section, dict[str, list[RecalledFact]], _Dates, int]:
    """The facts section re-made with `left` more room (within its budget), the chosen
    facts dated while that room holds their dates: the section, what it shows, the facts
    dated and the room still left."""
    before = section.size()
    own = section.unused() if at.keeps_unused else 0
    section = Section(FACT_HEADING, min(at.budget, before + own + left))
    shown, dated = _fact_lines(section, chosen, at.names, at.persona, at.zone, dated)
    return section, shown, dated, left - max(section.size() - before - own, 0)


def _chosen_facts(
    section: Section,
    tiers: list[dict[str, list[Fact]]],
    names: dict[str, str],
    persona: Persona | None,
    dated: _Dates | None = None,
) -> _Chosen:
    """Tiers fill the section's budget in priority order (with a persona: what it knows of
    each person, then its own knowledge, then the people's own facts; without one, the
    people's own facts alone), each fact, undated, while it fits with its subject's heading
    line beside the dates already given (`dated`). A subject none of whose facts fit is
    left out entirely."""
    chosen = _Chosen()
    room = section.room() + 1 - (dated.chars if dated else 0)
    for tier in tiers:
        for subject, facts in tier.items():
            for fact in facts:
                cost = len(_fact_line(fact)) + 1
                if subject not in chosen.subjects:
                    cost += len(_subject_line(subject, names, persona)) + 1
                if cost <= room:
                    room -= cost
                    chosen.subjects.setdefault(subject, []).append(fact)
                    chosen.order.append(fact)
    return chosen


def _fact_lines(
    section: Section,
    chosen: _Chosen,
    names: dict[str, str],
    persona: Persona | None = None,
    zone: tzinfo | None = None,
    dated: _Dates | None = None,
    more: bool = True,
) -> tuple[dict[str, list[RecalledFact]], _Dates]:
    """The facts section: each subject's chosen facts together under its heading line; with
    a zone, those dated already keep their dates and (`more`) the others are dated while the
    section's room holds their dates, in the order chosen."""
    kept = _Dates()
    room = section.room() + 1
    for subject, facts in chosen.subjects.items():
        room -= len(_subject_line(subject, names, persona)) + 1
        room -= sum(len(_fact_line(f)) + 1 for f in facts)
    already = dated.ids if dated else set()
    for fact in sorted(chosen.order, key=lambda f: f.fact_id not in already) if zone else []:
        cost = len(_fact_line(fact, zone)) - len(_fact_line(fact))
        if cost <= room and (more or fact.fact_id in already):
            room -= cost
            kept.ids.add(fact.fact_id)
            kept.chars += cost
    shown: dict[str, list[RecalledFact]] = {}
    for subject, facts in chosen.subjects.items():
        section.add(_subject_line(subject, names, persona))
        for fact in facts:
            section.add(_fact_line(fact, zone if fact.fact_id in kept.ids else None))
        shown[subject] = [
            RecalledFact(
                id=f.fact_id,
                text=_line(f.text),
                kind=f.kind.value,
                source=f.source.value,
                updated_ms=f.updated_ms,
                memory_scope=f.memory_scope,
            )
            for f in facts
        ]
    return shown, kept


def _subject_line(subject: str, names: dict[str, str], persona: Persona | None) -> str:
    if subject == keys.PERSONA_SUBJECT and persona is not None:
        return PERSONA_KNOWLEDGE_LINE.format(name=_who(persona.name))
    return f"- {_who(names.get(subject, ''))} (user {subject}):"


def _fact_line(fact: Fact, zone: tzinfo | None = None) -> str:
    """`  - "Alice lives in Lyon" (said 2026-05-09)`: when it was said, beside it."""
    said = f" ({said_label(fact, zone)})" if zone is not None else ""
    return f"  - {quote_for_prompt(fact.text)}{said}"


def _summary_line(section: Section, summary: ChannelSummary) -> RecalledSummary | None:
    """The summary as one quoted line; over the budget, its newest sentences that fit."""
    text = _line(summary.summary)
    sentences = _SENTENCE_END.split(text)
    while sentences and not section.add(f"- {quote_for_prompt(' '.join(sentences))}"):
        sentences = sentences[1:]
    if not sentences:
        return None
    return RecalledSummary(
        id=summary.episode_id,
        text=" ".join(sentences),
        start_ms=summary.start_ms,
        end_ms=summary.end_ms,
    )


def _elsewhere_lines(
    section: Section, elsewhere: list[RecentElsewhere], names: dict[str, str], zone: tzinfo
) -> list[RecalledElsewhere]:
    """`- 2023-05-08 14:05, "Alice" in <#123>: "asked the bot ..."`, newest first while they
    fit; the line is stored text (a model's, or a member's question): quoted like any."""
    shown: list[RecalledElsewhere] = []
    for recent in elsewhere:
        entry = recent.entry
        name = recent.name or names.get(entry.user_id, "")
        said = quote_for_prompt(entry.summary, limit=LINE_CHARS + 2)  # quotes aside
        at = local_minute(entry.at_ms, zone)
        line = f"- {at}, {_who(name)} in <#{entry.channel_id}>: {said}"
        if section.add(line):
            shown.append(
                RecalledElsewhere(
                    user_id=entry.user_id,
                    channel_id=entry.channel_id,
                    time_ms=entry.at_ms,
                    summary=_line(entry.summary),
                    provenance=list(entry.observation_sks),
                )
            )
    return shown


def _who(name: str) -> str:
    """A stored display name as the block shows it: quoted like any stored text."""
    plain = _line(name)
    return quote_for_prompt(plain, limit=NAME_CHARS) if plain else "someone"


def _passage_lines(
    section: Section,
    messages: list[FoundMessage],
    query: str | None,
    zone: tzinfo,
    reserve: int = 0,
) -> list[FoundMessage]:
    """Best first while they fit, each message once; once one does not, the next that fit
    beside `reserve` characters kept for the facts' dates. A long message is shown as its
    snippet for the query (search_leg.query_snippet)."""
    query_tokens = set(tokens(query or ""))
    shown: list[FoundMessage] = []
    seen: set[str] = set()
    filling = False
    for found in messages:
        if found.message.sk in seen:
            continue
        line = _passage_line(found, query_tokens, zone)
        if filling and len(line) > section.room() - reserve:
            continue
        if section.add(line):
            shown.append(found)
            seen.add(found.message.sk)
        else:
            filling = True
    return shown


def _passage_line(found: FoundMessage, query_tokens: set[str], zone: tzinfo) -> str:
    """`- 2023-05-08, "Caroline": "..."`."""
    message = found.message
    line = f"- {local_day(message.at_ms, zone)}, {_who(message.author_name or '')}: "
    return line + quote_for_prompt(query_snippet(message.content, query_tokens))


def _recalled_passage(found: FoundMessage) -> RecalledPassage:
    message = found.message
    return RecalledPassage(
        id=found.passage_id,
        channel_id=found.channel_id,
        time_ms=message.at_ms,
        authors=[message.author_id] if message.author_id else [],
        author_names=[_line(message.author_name)] if message.author_name else [],
        text=_line(message.content),
        provenance=[message.sk],
    )


def _line(text: str) -> str:
    return scrub(text)
