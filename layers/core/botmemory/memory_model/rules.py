"""An offline, deterministic memory model.

It turns explicit first-person statements ("I'm a nurse", "I love hiking", "I use
Vim") into facts and the batch into an extractive episode. It lets the whole
system run and be demonstrated with no network; the real models understand far
more, this one only what it was written to recognise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from botmemory.memory_model.contract import (
    ConsolidationAnswer,
    ModelInput,
    NumberedObservation,
    ProposedEpisode,
    ProposedFact,
)
from botmemory.records import FactKind

_OBJECT = r"(?P<x>[^.!?;:\n]{2,90})"
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?])\s+|\n+")
# "I'm a nurse and I love hiking" holds two statements: split before a new "I"/"my" clause.
_CLAUSE_SPLIT = re.compile(r",?\s+(?:and|but|so|while)\s+(?=(?:I|my)\b)|;\s*", re.IGNORECASE)


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    template: str
    kind: FactKind
    # Facts that hold one value at a time: a new one supersedes the old.
    slot: str | None = None


def _p(pattern: str, template: str, kind: FactKind, slot: str | None = None) -> _Pattern:
    return _Pattern(re.compile(r"(?:^|\b)" + pattern, re.IGNORECASE), template, kind, slot)


_PATTERNS: list[_Pattern] = [
    _p(r"I(?:'m| am) allergic to " + _OBJECT, "Is allergic to {x}", FactKind.CONSTRAINT),
    _p(
        r"I (?:can't|cannot|can not|don't|do not) (?:eat|drink) " + _OBJECT,
        "Does not eat or drink {x}",
        FactKind.CONSTRAINT,
    ),
    _p(
        r"I(?:'m| am) (?:a |an )?(?P<x>vegan|vegetarian|pescatarian)\b",
        "Is {x}",
        FactKind.CONSTRAINT,
        "diet",
    ),
    _p(r"I (?:don't|do not) (?:like|enjoy) " + _OBJECT, "Dislikes {x}", FactKind.PREFERENCE),
    _p(
        r"I (?:really |absolutely |just )?(?:love|like|enjoy|adore) " + _OBJECT,
        "Likes {x}",
        FactKind.PREFERENCE,
    ),
    _p(
        r"I (?:really )?(?:hate|dislike|can't stand) " + _OBJECT,
        "Dislikes {x}",
        FactKind.PREFERENCE,
    ),
    _p(r"I (?:prefer) " + _OBJECT, "Prefers {x}", FactKind.PREFERENCE),
    _p(
        r"my (?:favorite|favourite) (?P<what>[a-z ]{2,30}?) is " + _OBJECT,
        "Favourite {what} is {x}",
        FactKind.PREFERENCE,
    ),
    _p(
        r"I(?:'m| am) (?:currently )?(?:working on|building|writing|making) " + _OBJECT,
        "Is working on {x}",
        FactKind.PROJECT,
    ),
    _p(r"I work (?:at|for) " + _OBJECT, "Works at {x}", FactKind.FACT, "employer"),
    _p(r"I work as (?:a |an )?" + _OBJECT, "Works as {x}", FactKind.FACT, "job"),
    _p(
        r"I(?:'m| am) (?:a |an )(?P<x>[a-z][a-z -]{2,40}?)(?=$|[.,!?;]| and | who | at | in | for )",
        "Is a {x}",
        FactKind.FACT,
    ),
    _p(r"I (?:live|moved) (?:in|to) " + _OBJECT, "Lives in {x}", FactKind.FACT, "home"),
    _p(r"I(?:'m| am) from " + _OBJECT, "Is from {x}", FactKind.FACT, "origin"),
    _p(r"I (?:use|code in|program in|write in) " + _OBJECT, "Uses {x}", FactKind.TOOL),
    _p(r"I (?:always|usually|normally) " + _OBJECT, "Usually {x}", FactKind.WORKFLOW),
    _p(
        r"my (?P<who>wife|husband|partner|son|daughter|kids|children|mom|mother|dad|father|brother|sister|best friend|dog|cat) (?P<x>[^.!?;\n]{2,80})",
        "Their {who} {x}",
        FactKind.PERSON,
    ),
]

_EPISODE_QUOTES = 3
# However many statements a message strings together, the extractor proposes at most this many
# facts per observation and per answer: one member's wall of clauses cannot crowd out everyone
# else's facts or overflow the answer.
FACTS_PER_OBSERVATION = 3
FACTS_PER_ANSWER = 40


class RulesModel:
    name = "rules"

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        known_slots: dict[tuple[str, str], str] = {}
        for fact in batch.facts:
            slot = _slot_of(fact.text)
            if slot:
                known_slots[(fact.user_id, slot)] = fact.fact_id
        facts: list[ProposedFact] = []
        for obs in batch.observations:
            if obs.kind not in ("msg", "edit"):
                continue
            room = min(FACTS_PER_OBSERVATION, FACTS_PER_ANSWER - len(facts))
            facts += self._facts_of(obs, known_slots)[:room]
        return ConsolidationAnswer(facts=facts, episode=self._episode(batch))

    @staticmethod
    def _facts_of(
        obs: NumberedObservation, known_slots: dict[tuple[str, str], str]
    ) -> list[ProposedFact]:
        """The facts one observation states, one per clause at most."""
        facts: list[ProposedFact] = []
        clauses = [
            clause
            for sentence in _SENTENCE_SPLIT.split(obs.text)
            if not sentence.rstrip().endswith("?")  # a question states nothing
            for clause in _CLAUSE_SPLIT.split(sentence)
        ]
        for sentence in clauses:
            if len(facts) >= FACTS_PER_OBSERVATION:
                break
            for pattern in _PATTERNS:
                match = pattern.regex.search(sentence)
                if not match:
                    continue
                groups = {k: v.strip().rstrip(",") for k, v in match.groupdict().items() if v}
                text = pattern.template.format(**groups)
                old = known_slots.get((obs.author_id, pattern.slot)) if pattern.slot else None
                facts.append(
                    ProposedFact(
                        user_id=obs.author_id,
                        text=text[0].upper() + text[1:],
                        kind=pattern.kind,
                        evidence=[obs.number],
                        supersedes=[old] if old else [],
                    )
                )
                break  # one fact per clause keeps the extractor predictable
        return facts

    @staticmethod
    def _episode(batch: ModelInput) -> ProposedEpisode:
        people: dict[str, str] = {}
        for obs in batch.observations:
            if obs.kind != "bot":
                people.setdefault(obs.author_id, obs.author_name)
        spoken = [o for o in batch.observations if o.kind in ("msg", "edit", "bot") and o.text]
        # The longest messages carry the most content; keep them in conversation order.
        chosen = sorted(
            sorted(spoken, key=lambda o: (-len(o.text), o.number))[:_EPISODE_QUOTES],
            key=lambda o: o.number,
        )
        quotes = " ".join(f"{o.author_name}: \u201c{_first_sentence(o.text)}\u201d" for o in chosen)
        names = ", ".join(people.values()) or "The bot"
        summary = f"{names} talked ({len(batch.observations)} events). {quotes}".strip()
        return ProposedEpisode(summary=summary, participants=list(people))


def _slot_of(text: str) -> str | None:
    for pattern in _PATTERNS:
        if pattern.slot and text.startswith(pattern.template.split(" {")[0]):
            return pattern.slot
    return None


def _first_sentence(text: str) -> str:
    first = _SENTENCE_SPLIT.split(text.strip(), maxsplit=1)[0]
    return first if len(first) <= 160 else first[:159].rstrip() + "…"
