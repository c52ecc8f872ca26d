"""An offline, deterministic memory model.

It turns clear first-person statements ("I'm a nurse", "I love pottery", "my daughter is
5") into third-person facts about their author ("Caroline is a nurse", "Caroline loves
pottery", "Caroline's daughter is 5") and names what a batch was about in its episode
("Caroline and Melanie talked about pottery, charity race and adoption."). It lets the
whole system run, be demonstrated and be evaluated with no network; the real models
understand far more, this one only what it was written to recognise, and it would rather
miss a fact than keep a vague one. It proposes people's own facts only (scope `user`), with
a persona active or not: what a persona learns takes a model that understands the role.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from datetime import date
from itertools import takewhile

from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    ModelInput,
    NumberedObservation,
    ProposedEpisode,
    ProposedFact,
    RecentLine,
)
from botmemory.consolidation.model.rules_patterns import (
    BAD_OPENERS,
    CLAUSE_SPLIT,
    DEMONSTRATIVES,
    DETERMINERS,
    FAMILY,
    GREETINGS,
    HYPOTHETICAL_START,
    IDENTITY_SLOTS,
    INTENSIFIERS,
    IRREGULAR,
    LEAD_IN,
    MODAL,
    MOOD,
    MY_NOT,
    NEG,
    NOT_TOPICS,
    NOUN_BEFORE,
    OBJECT_END,
    PATTERNS,
    PLACEHOLDER,
    PREFIX,
    PREPOSITIONS,
    QUOTED,
    REPORTED,
    SAFETY,
    SECOND_PERSON,
    SELF,
    SENTENCE_END,
    SENTENCE_SPLIT,
    SLOT_BY_VERB,
    SLOT_OF,
    STOPWORDS,
    THIRD,
    TOKEN,
    TRAILING,
    UNSAFE,
    VAGUE,
    VERB_BEFORE,
    VOCATIVE,
    WORD,
    Pattern,
)
from botmemory.memory.behaviour import behaviour_request
from botmemory.records import FactKind, FactPriority, MemoryScope
from botmemory.when.relative import last_day, with_dates
from botmemory.when.window import said_day
from botmemory.when.zones import zone_of

# However many statements a message strings together, the extractor proposes at most this many
# facts per observation and per answer: one member's wall of clauses cannot crowd out everyone
# else's facts or overflow the answer.
FACTS_PER_OBSERVATION = 2
FACTS_PER_ANSWER = 40
# Well inside the contract (2,000) and the store's default MEMORY_FACT_CHARS (240): a fact is
# one short sentence, never a paragraph the consolidator has to cut.
FACT_CHARS = 200
# Well inside the contract (8,000) and the store's default MEMORY_EPISODE_CHARS (600).
EPISODE_CHARS = 300
EPISODE_TOPICS = 4
# A short-term line (botmemory.memory.short_term cuts it there too).
RECENT_CHARS = 160
EPISODE_NAMES = 4
_MAX_EVIDENCE = 50  # the contract's cap on one fact's evidence


@dataclass(frozen=True)
class _Statement:
    text: str
    kind: FactKind
    slot: str | None
    passing: bool = False  # kept only with the day it ends
    # Where the day it holds until may be said: its own clause ("until Friday"), then the
    # sentence's next clauses up to another statement ("..., back on Monday").
    clause: str = ""
    after: str = ""


class RulesModel:
    name = "rules"

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        known_slots = _known_slots(batch)
        facts: dict[tuple[str, str], ProposedFact] = {}
        zone = zone_of(batch.zone)
        for obs in batch.observations:
            if obs.kind not in ("msg", "edit") or len(facts) >= FACTS_PER_ANSWER:
                continue
            said = said_day(obs.at_ms, zone) if obs.at_ms is not None else None
            for statement in _statements(obs.text, _name_of(obs)):
                until = _until(statement, said) if said is not None else None
                if statement.passing and until is None:
                    continue  # "I'm in Tokyo" with no end says nothing durable
                if said is not None:  # "next Friday" kept, its date beside it (the contract's rule)
                    statement = replace(statement, text=with_dates(statement.text, said))
                _propose(facts, obs, statement, known_slots, until.isoformat() if until else "")
        episode = _episode(batch)
        return ConsolidationAnswer(
            facts=list(facts.values())[:FACTS_PER_ANSWER],
            episode=episode,
            channel_summary=_rolled(batch.summary, episode.summary, batch.summary_max_chars),
            recent=_recent(batch),
        )

    def recompress(self, summary: str, target_chars: int) -> str:
        """The newest sentences that fit the target: this model summarises by appending."""
        return _newest_sentences(summary, target_chars)


def _rolled(summary: str, episode: str, max_chars: int) -> str:
    """The channel summary with the batch's episode appended, oldest sentences dropped to
    stay within the cap."""
    return _newest_sentences(f"{summary} {episode}".strip(), max_chars)


def _newest_sentences(text: str, max_chars: int) -> str:
    sentences = [s for s in SENTENCE_END.split(text.strip()) if s]
    kept: list[str] = []
    used = 0
    for sentence in reversed(sentences):
        if used + len(sentence) + (1 if kept else 0) > max_chars:
            break
        kept.insert(0, sentence)
        used += len(sentence) + (1 if len(kept) > 1 else 0)
    return " ".join(kept)


def _until(statement: _Statement, said: date) -> date | None:
    """The last day a statement holds, when its words give one (botmemory.when.relative);
    "back on Monday" only for a passing state, where what ends is clear."""
    found = last_day(statement.clause, said)
    if found is None and statement.passing:
        found = last_day(f"{statement.clause} {statement.after}", said, back=True)
    return found


def _propose(
    facts: dict[tuple[str, str], ProposedFact],
    obs: NumberedObservation,
    statement: _Statement,
    known_slots: dict[tuple[str, str], str],
    valid_until: str = "",
) -> None:
    """Add a fact, or cite one more message for a fact already proposed (its end as the
    later message says it: a restatement without one clears it)."""
    key = (obs.author_id, statement.text.casefold())
    same = facts.get(key)
    if same is not None:
        if obs.number not in same.evidence and len(same.evidence) < _MAX_EVIDENCE:
            same.evidence.append(obs.number)
            same.valid_until = valid_until
        return
    slot = statement.slot
    old = known_slots.get((obs.author_id, slot)) if slot else None
    facts[key] = ProposedFact(
        user_id=obs.author_id,
        text=statement.text,
        kind=statement.kind,
        evidence=[obs.number],
        supersedes=[old] if old else [],
        priority=_priority_of(statement),
        valid_until=valid_until,
    )


def _priority_of(statement: _Statement) -> FactPriority:
    """Health and safety first, then who the person is, what they are working on, the rest."""
    if SAFETY.search(statement.text):
        return FactPriority.SAFETY
    if statement.slot in IDENTITY_SLOTS or statement.kind == FactKind.PERSON:
        return FactPriority.IDENTITY
    if statement.kind == FactKind.PROJECT:
        return FactPriority.COMMITMENT
    return FactPriority.TASTE


def _name_of(obs: NumberedObservation) -> str:
    return " ".join(obs.author_name.split()) or obs.author_id


def _known_slots(batch: ModelInput) -> dict[tuple[str, str], str]:
    """The slots of the people's own facts (this model proposes user facts only, and a fact
    supersedes only one of its own scope)."""
    known: dict[tuple[str, str], str] = {}
    for fact in batch.facts:
        if fact.scope != MemoryScope.USER:
            continue
        slot = _slot_of(fact.text)
        if slot:
            known[(fact.user_id, slot)] = fact.fact_id
    return known


def _slot_of(text: str) -> str | None:
    """The single-valued slot a stored fact fills, whether it starts with its subject's name
    ("Alice lives in Lyon") or, as older facts do, with its verb ("Lives in Lyon")."""
    match = SLOT_OF.match(text.strip())
    if not match or re.search(r"['’]s\b", match["who"]):  # "Alice's mum lives in ..."
        return None
    verb = " ".join(match["verb"].lower().split())
    if verb.startswith("is ") and verb != "is from":
        return "age" if verb.endswith("old") else "diet"
    return SLOT_BY_VERB.get(verb) or SLOT_BY_VERB.get(verb.split()[0])


# Facts --------------------------------------------------------------------------------------


def kind_of(text: str) -> FactKind:
    """The kind these rules give what a person says of themselves ("I use Neovim": tool, "I'm
    allergic to peanuts": constraint, "my sister lives in Lyon": person): that of the first
    statement they find in it; `fact` when they find none. `/memory remember` classifies by
    it, so a remembered fact gets the kind consolidation would have given the same words."""
    found = _statements(text, "someone")
    return found[0].kind if found else FactKind.FACT


def _statements(text: str, name: str) -> list[_Statement]:
    """The facts one message states about its author, in order, one per clause at most and
    at most FACTS_PER_OBSERVATION."""
    found: list[_Statement] = []
    for clause, quotes, after in _clauses(text):
        statement = _statement(clause, quotes, name)
        if statement is not None:
            statement = replace(statement, clause=clause, after=after)
        if statement is None or behaviour_request(statement.text):
            continue  # "I prefer to be called master" asks the bot something: not a fact
        if all(s.text.casefold() != statement.text.casefold() for s in found):
            found.append(statement)
            if len(found) == FACTS_PER_OBSERVATION:
                break
    return found


def _clauses(text: str) -> Iterator[tuple[str, list[str], str]]:
    """Clauses that may state something: not in a question, a quote, reported speech or a
    hypothetical; each with the clauses after it up to the next that may (what they say
    belongs to it: "I'm away, back on Monday"). Quoted spans are masked so that their words
    never start a statement."""
    # Markdown emphasis ("I **love** pottery") is not part of the words.
    body = PREFIX.sub("", text.replace("’", "'").replace("*", "").replace("~~", "").strip())
    for line in body.splitlines():
        if line.lstrip().startswith(">") or "```" in line:
            continue  # a Discord quote or code: someone else's words, or not prose
        masked, quotes = _masked(line)
        for sentence in SENTENCE_SPLIT.split(masked):
            yield from ((clause, quotes, after) for clause, after in _sentence_clauses(sentence))


def _masked(line: str) -> tuple[str, list[str]]:
    """The line with each quoted span replaced by a numbered placeholder, and the spans."""
    quotes: list[str] = []

    def mask(match: re.Match[str]) -> str:
        quotes.append(match.group(0))
        # A quote that ends its sentence ("... called "Home." It is ...") still ends it.
        end = match.group(0)[-2:-1] if match.group(0)[-2:-1] in (".", "!") else ""
        return f"\ue000{len(quotes) - 1}\ue001{end}"

    return QUOTED.sub(mask, line), quotes


def _sentence_clauses(sentence: str) -> Iterator[tuple[str, str]]:
    if re.search(r"\?\W*$", sentence) or REPORTED.search(sentence) or UNSAFE.search(sentence):
        return  # a question states nothing; reported speech is someone else's words
    clauses = [LEAD_IN.sub("", part.strip()) for part in CLAUSE_SPLIT.split(sentence)]
    for index, clause in enumerate(clauses):
        if HYPOTHETICAL_START.match(clause):
            return  # the rest of the sentence is conditional
        if _first_person(clause) and not MODAL.search(clause):
            after = list(takewhile(lambda c: not _first_person(c), clauses[index + 1 :]))
            yield clause, ", ".join(after)


def _first_person(clause: str) -> bool:
    return clause[:2].lower() in ("i ", "i'", "my")


def _statement(clause: str, quotes: list[str], name: str) -> _Statement | None:
    for pattern in PATTERNS:
        match = pattern.regex.match(clause)
        if match:
            statement = _render(pattern, match, clause, quotes, name)
            if statement:
                return statement
    return None


def _render(
    pattern: Pattern, match: re.Match[str], clause: str, quotes: list[str], name: str
) -> _Statement | None:
    rest = _object(clause[match.end() :], quotes) if pattern.takes_rest else ""
    groups = {k: " ".join(v.split()) for k, v in match.groupdict().items() if v is not None}
    if rest is None or (pattern.takes_rest and not rest and not pattern.rest_optional):
        return None
    if not _said_enough(pattern, groups, rest):
        return None
    fields = _fields(groups, rest, name)
    text = " ".join(pattern.template.format(**fields).split())
    if len(text) > FACT_CHARS or _content_words(text) < 2:
        return None
    kind = _kind_of(pattern, groups)
    return _Statement(text=text, kind=kind, slot=pattern.slot, passing=pattern.passing)


def _object(rest: str, quotes: list[str]) -> str | None:
    """The stated object: up to the clause's end, quotes restored, fillers trimmed, cut to
    fit a short fact. None when it is about the listener ("a big fan of yours")."""
    said = rest[: end.start()] if (end := OBJECT_END.search(rest)) else rest
    if SECOND_PERSON.intersection(w.lower() for w in WORD.findall(said)):
        return None
    text = SELF.sub(lambda m: THIRD[m.group(0).lower()], said)
    # Quotes come back last, whole: their own words and punctuation are as said.
    text = PLACEHOLDER.sub(lambda m: quotes[int(m.group(1))], _trimmed(text.split()))
    if len(text) > FACT_CHARS - 60:  # leave room for the name and the verb
        text = _trimmed(text[: FACT_CHARS - 60].split()[:-1])
    return text


def _trimmed(words: list[str]) -> str:
    """The words without trailing fillers ("pottery too", "a safe and")."""
    while words and words[-1].lower().strip("'.!") in TRAILING:
        words.pop()
    return " ".join(words).rstrip(".!").strip()


def _said_enough(pattern: Pattern, groups: dict[str, str], rest: str) -> bool:
    """The object names something: it opens with no pronoun, is not about the listener,
    and holds a word that is neither a stopword nor vague."""
    core = " ".join([groups[g] for g in pattern.core if g in groups] + [rest])
    if not pattern.takes_rest:
        core = groups.get("x", "")
    words = [w.lower() for w in WORD.findall(core)]
    if not words:
        return False
    if MOOD.match(rest) or _pronoun_object(rest or core):
        return False
    if "what" in groups and not _about_the_speaker(groups, words):
        return False
    opening = [w for w in WORD.findall(rest.lower()) if w not in STOPWORDS][:2]
    if len(opening) == 2 and all(w in VAGUE for w in opening):
        return False  # "a great time doing walks", "a bit of a drag"
    return any(w not in STOPWORDS and w not in VAGUE for w in words)


def _pronoun_object(text: str) -> bool:
    """ "doing it for years", "working on that", "love this": a pronoun or a bare
    determiner where the object should be ("this song" names something)."""
    words = [w.lower() for w in WORD.findall(text)]
    while words and words[0] in PREPOSITIONS:
        words.pop(0)
    if not words:
        return False
    if words[0] in DEMONSTRATIVES:
        following = words[1] if len(words) > 1 else ""
        return not following or following in STOPWORDS or following in VAGUE
    return words[0] in BAD_OPENERS


def _about_the_speaker(groups: dict[str, str], complement: list[str]) -> bool:
    """ "My X is Y" keeps: X a plain noun phrase, no secret or idiom, Y no passing mood;
    "my X lives in Y" only when X is family, a friend or a pet."""
    heads = groups["what"].lower().split()
    if any(w in STOPWORDS or w in MY_NOT for w in heads):
        return False
    if groups["w"].lower() not in ("is", "are") and heads[-1] not in FAMILY:
        return False
    return complement[0] not in INTENSIFIERS


def _fields(groups: dict[str, str], rest: str, name: str) -> dict[str, str]:
    fields = dict(groups)
    fields["n"], fields["ns"], fields["x"] = name, f"{name}'s", rest or fields.get("x", "")
    if "v" in groups:
        fields["v"] = _third_person(groups["v"])
    if "neg" in groups:
        fields["neg"] = NEG[groups["neg"].lower()]
    if "w" in groups:
        fields["w"] = groups["w"].lower() if not groups["w"].isdigit() else groups["w"]
    return fields


def _kind_of(pattern: Pattern, groups: dict[str, str]) -> FactKind:
    what = groups.get("what", "").lower().split()
    if not what:
        return pattern.kind
    if what[0] in ("favourite", "favorite", "fave"):
        return FactKind.PREFERENCE
    return FactKind.PERSON if what[-1] in FAMILY else pattern.kind


def _third_person(verb: str) -> str:
    """I love → loves, I have → has, I go to → goes to; a past form stays as it is."""
    head, _, tail = verb.lower().partition(" ")
    if head in IRREGULAR:
        head = IRREGULAR[head]
    elif head.endswith("ed"):
        pass
    elif head.endswith(("s", "sh", "ch", "x", "z", "o")):
        head += "es"
    elif re.search(r"[^aeiou]y$", head):
        head = head[:-1] + "ies"
    else:
        head += "s"
    return f"{head} {tail}".strip()


def _content_words(text: str) -> int:
    return sum(1 for w in WORD.findall(text) if w.lower() not in STOPWORDS)


# Episodes -----------------------------------------------------------------------------------


@dataclass
class _Topics:
    """Candidate topics of a batch: how many messages name each word or two-word phrase,
    where each first appears, how it is written, and whether it stands where nouns do."""

    messages: Counter[str] = field(default_factory=Counter)
    first: dict[str, int] = field(default_factory=dict)
    shown: dict[str, str] = field(default_factory=dict)
    nounish: Counter[str] = field(default_factory=Counter)
    verbish: Counter[str] = field(default_factory=Counter)


def _episode(batch: ModelInput) -> ProposedEpisode:
    people: dict[str, str] = {}
    for obs in batch.observations:
        if obs.kind != "bot":
            people.setdefault(obs.author_id, _name_of(obs))
    spoken = [o for o in batch.observations if o.kind in ("msg", "edit") and o.text]
    if not spoken:  # only the bot spoke: its words are what happened
        spoken = [o for o in batch.observations if o.kind == "bot" and o.text]
    who = _names_phrase(list(people.values())) or "The bot"
    topics = _topics([o.text for o in spoken], people.values())
    summary = _summary(who, topics)
    while len(summary) > EPISODE_CHARS and topics:
        topics = topics[:-1]  # a shorter list rather than a cut word
        summary = _summary(who, topics)
    return ProposedEpisode(summary=summary[:EPISODE_CHARS], participants=list(people))


def _recent(batch: ModelInput) -> list[RecentLine]:
    """Per person who wrote, one line on their exchange: what they talked about (or asked
    the bot about, when the bot answered right after them), and their last words."""
    said: dict[str, list[NumberedObservation]] = {}
    asked: set[str] = set()
    for index, obs in enumerate(batch.observations):
        if obs.kind in ("msg", "edit") and obs.text:
            said.setdefault(obs.author_id, []).append(obs)
            following = batch.observations[index + 1 : index + 2]
            if following and following[0].kind == "bot":
                asked.add(obs.author_id)
    lines = []
    for user_id, theirs in said.items():
        if len(user_id) > 32:  # not an id the contract takes: no line
            continue
        topics = _topics([o.text for o in theirs], [_name_of(o) for o in theirs])
        verb = "asked the bot about" if user_id in asked else "talked about"
        line = f"{verb} {_joined(topics)}: " if topics else "said: "
        lines.append(RecentLine(user_id=user_id, line=(line + theirs[-1].text)[:RECENT_CHARS]))
    return lines


def _summary(who: str, topics: list[str]) -> str:
    return f"{who} talked about {_joined(topics)}." if topics else f"{who} chatted briefly."


def _names_phrase(names: list[str]) -> str:
    shown = [n[:40] for n in names[:EPISODE_NAMES]]
    others = len(names) - len(shown)
    if others:
        shown.append(f"{others} other{'s' if others > 1 else ''}")
    return _joined(shown)


def _joined(items: list[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def _topics(texts: list[str], names: Iterable[str]) -> list[str]:
    """The batch's most salient noun-ish words and recurring two-word phrases, best first:
    named in the most messages, then longest, then earliest."""
    found = _Topics()
    name_parts = {p for n in names for p in re.findall(r"[a-z]+", n.lower()) if len(p) >= 3}
    for text in texts:
        named: set[str] = set()
        for sentence in SENTENCE_SPLIT.split(PREFIX.sub("", text.replace("’", "'"))):
            sentence = VOCATIVE.sub(" ", sentence)
            named |= _scan([m.group(0) for m in TOKEN.finditer(sentence)], name_parts, found)
        found.messages.update(named)
    return _best(found)


def _scan(tokens: list[str], name_parts: set[str], found: _Topics) -> set[str]:
    """The topics one sentence names, noting for each whether it stands where a noun does
    (after "a", "my", "about": "the pottery class") or a verb ("to paint", "I paint")."""
    named: set[str] = set()
    keys = [re.sub(r"'s$", "", t).lower() for t in tokens]
    topical = [_topical(k, name_parts) for k in keys] + [False]
    for i, key in enumerate(keys):
        before = keys[i - 1] if i else ""
        if not topical[i] or before in GREETINGS:  # "Thanks Mel": an addressee, not a topic
            continue
        pair = f"{before} {key}" if i and topical[i - 1] else None
        opener = keys[i - 2] if pair and i > 1 else before
        # A word right before another topic word modifies it ("grand opening"): no noun.
        head = not topical[i + 1]
        for term in (key, pair) if pair else (key,):
            named.add(term)
            found.first.setdefault(term, len(found.first))
            found.nounish[term] += head and _noun_after(opener, term, tokens[i], i)
        found.verbish[key] += before in VERB_BEFORE
        if i > 0 or tokens[i].isupper():  # a sentence's first word says nothing of its case
            found.shown.setdefault(key, re.sub(r"'s$", "", tokens[i]))
    return named


def _noun_after(opener: str, term: str, token: str, index: int) -> bool:
    """Whether `term`, after `opener`, stands where a noun does. A form in -ing is a verb
    after a preposition ("about helping") and a thing only after a determiner ("my
    painting"); a capital mid-sentence is a name."""
    if index > 0 and token[0].isupper():
        return True
    if term.endswith("ing") and " " not in term:
        return opener in DETERMINERS
    return opener in NOUN_BEFORE


def _topical(key: str, name_parts: set[str]) -> bool:
    if len(key) < 3 or "'" in key or key in NOT_TOPICS:
        return False
    if key.endswith("ly") or (key.endswith("ed") and len(key) > 4):
        return False  # adverbs and past forms: rarely what a talk is about
    # A participant's name, or a nickname cut from it ("Mel" for Melanie).
    return not any(part.startswith(key) for part in name_parts)


def _best(found: _Topics) -> list[str]:
    scored: list[tuple[int, int, int, str]] = []
    for term, count in found.messages.items():
        if found.nounish[term] <= found.verbish[term]:
            continue  # said as a verb or an adjective more than as a thing
        if " " in term:
            if count < 2:
                continue  # a phrase only when it recurs
            count *= 2
        scored.append((-count, -len(term), found.first[term], term))
    chosen: list[str] = []
    for *_, key in sorted(scored):
        if len(chosen) == EPISODE_TOPICS:
            break
        words = {w.removesuffix("s") for w in key.split()}
        if any(words & {w.removesuffix("s") for w in c.split()} for c in chosen):
            continue  # "mental health" already says "health", "horse" says "horses"
        chosen.append(key)
    return [" ".join(found.shown.get(w, w) for w in key.split()) for key in chosen]
