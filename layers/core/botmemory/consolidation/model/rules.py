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
from dataclasses import dataclass, field

from botmemory.consolidation.model.contract import (
    ConsolidationAnswer,
    ModelInput,
    NumberedObservation,
    ProposedEpisode,
    ProposedFact,
)
from botmemory.memory.behaviour import behaviour_request
from botmemory.records import FactKind, FactPriority, MemoryScope

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
EPISODE_NAMES = 4
_MAX_EVIDENCE = 50  # the contract's cap on one fact's evidence

# Where the channel summary is cut into sentences (after a full stop and a space).
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# Word lists -------------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


_STOPWORDS = _words(
    """a about above after again against all almost also am an and any are aren't as at be
    because been before being below between both but by can can't cannot could couldn't did
    didn't do does doesn't doing don't down during each either else even ever every few for
    from further had hadn't has hasn't have haven't having he he'd he'll he's her here here's
    hers herself him himself his how how's i i'd i'll i'm i've if in into is isn't it it's its
    itself just let's me mine more most much must my myself no nor not now of off on once only
    or other ought our ours ourselves out over own per quite rather same she she'd she'll she's
    should shouldn't so some such than that that's the their theirs them themselves then there
    there's these they they'd they'll they're they've this those though through thus to too
    under until up upon us very via was wasn't we we'd we'll we're we've were weren't what
    what's when when's where where's whether which while who who's whom whose why why's will
    with won't would wouldn't yet you you'd you'll you're you've your yours yourself yourselves
    also anyway anyways lol haha tbh btw ok okay yeah yes yep yup oh ah um uh hmm gonna wanna
    gotta kinda sorta really actually totally pretty super lots there"""
)
# Words that say nothing about a person on their own: a fact needs more than these.
_VAGUE = _words(
    """thing things stuff lot lots bit kind sort way ways time times one ones something
    anything everything nothing someone anyone everyone idea ideas question questions moment
    sec second minute point fact news fan feeling feelings chance clue deal matter
    think thinking say saying see seeing hear hearing know knowing get getting go going try
    trying feel feeling look looking talk talking chat chatting wonder wondering hope hoping
    want wanting mean meaning guess be being have having take taking keep keeping come coming
    tell telling hang hanging wait waiting working doing make making big huge small little
    good great nice cool awesome amazing fun fine glad happy sad excited interesting
    important special hard tough easy busy tired sure right wrong best better bad worse lucky
    proud grateful thankful stoked sorry well true crazy wild weird lovely wonderful fantastic
    incredible perfect okay much many lately recently today tonight yesterday ever usual usually
    again anymore forever sometimes often"""
)
# Greetings, fillers, common verbs and evaluations: never what a conversation was "about".
_NOT_TOPICS = (
    _STOPWORDS
    | _VAGUE
    | _words(
        """hi hey hello thanks thank bye goodbye congrats congratulations welcome please
        wow omg yay cheers gosh man dude guys everybody somebody people person
        today yesterday tomorrow tonight morning night week weekend weeks day days month
        months year years ago soon later last next lately recently always never sometimes
        often usually already still back around away again maybe definitely absolutely
        love loved loves like liked likes enjoy enjoyed feel felt felts made makes got gets
        went goes gone said says told tell tells thought thinks knew knows saw sees seen
        want wants wanted need needs needed seem seems seemed sounds sound sounded looks
        looked let lets put keep kept give gave given find found help helps helped use used
        start started work works worked tried tries come came take took taken show showed
        shown glad happy excited amazing awesome great nice cool fun super cute sweet
        beautiful exciting inspiring inspired incredible important special wonderful
        fantastic lovely totally truly really pretty quite kind whole own new old big small
        little much many more most least other another such same different real sure yeah
        lol haha hope hoping thanks keep share sharing shared means meant mean
        ready able awesome cool stuff thing things part journey happen motivate motivates
        remind reminds words difference moments together huge strong fresh pic pics prob"""
    )
)
# "My X is ..." about these is a secret or an idiom, never a fact worth keeping.
_MY_NOT = _words(
    """password passwords passcode pin ssn address email phone number card account login
    username name mind heart point bad pleasure guess question turn day week morning night
    weekend god goodness gosh head brain bet fault word apologies condolences"""
)
_FAMILY = _words(
    """wife husband partner spouse boyfriend girlfriend fiance fiancee son sons daughter
    daughters kid kids child children baby mom mother mum dad father parents brother brothers
    sister sisters siblings grandma grandmother grandpa grandfather grandparents aunt uncle
    cousin cousins niece nephew friend friends family dog dogs cat cats pet pets puppy
    kitten"""
)
# Words that open an object about the listener, a pronoun or nothing at all.
_BAD_OPENERS = _words(
    """it it's its that's them they he she him her his you your
    yours me us we what how when where why who which so too very much there here such
    same what's whatever sure one"""
)
_SECOND_PERSON = _words("you your yours you're you've you'll ya u")
# An object opening with these is a passing mood or a compliment, not a fact about the speaker:
# "I always feel so peaceful", "I've been feeling a bit stressed", "I love the way it turned".
_MOOD = re.compile(
    r"^(?:so|very|really|super|too|pretty|quite|such|kinda|(?:a\s+)?(?:bit|little)|"
    r"(?:kind|sort)\s+of|the\s+(?:way|fact|idea|thought|feeling|vibes?|look|sound)s?)\b",
    re.IGNORECASE,
)
_PREPOSITIONS = _words("on in at about with for to into of from out up over")
_DEMONSTRATIVES = _words("this that these those")
# Complements that describe a mood, not the person: "my kids are so excited".
_INTENSIFIERS = _words(
    "so very really super too pretty quite such kinda always just still getting going"
)

# Statements -------------------------------------------------------------------------------

_ADV = (
    r"(?:(?:really|absolutely|just|also|still|totally|truly|now|currently|genuinely|actually|"
    r"personally|definitely|honestly|do|even|kinda|already|originally|mostly|especially|"
    r"seriously|literally|recently)\s+)*"
)
_I = r"i\s+" + _ADV
_AM = r"i(?:'m|\s+am)\s+" + _ADV
_HAVE_BEEN = r"i(?:'ve|\s+have)\s+" + _ADV + r"been\s+"
_END = r"(?=[\s.!…]*$)"  # a clause that says only this
_NEG = {"can't": "can't", "cannot": "cannot", "can not": "cannot"}
_NEG |= {"don't": "doesn't", "do not": "does not"}


@dataclass(frozen=True)
class _Pattern:
    regex: re.Pattern[str]
    template: str  # {n} the name, {ns} its possessive, {x} the object, groups by name
    kind: FactKind
    # Facts that hold one value at a time: a new one supersedes the old.
    slot: str | None = None
    # Groups that belong to the object: they, with the rest of the clause, must say something.
    core: tuple[str, ...] = ()
    # False when the regex itself captures everything the fact says.
    takes_rest: bool = True
    # True when the verb alone says something ("I'm married"): the rest may be empty.
    rest_optional: bool = False


def _p(
    pattern: str,
    template: str,
    kind: FactKind,
    *,
    slot: str | None = None,
    core: tuple[str, ...] = (),
    takes_rest: bool = True,
    rest_optional: bool = False,
) -> _Pattern:
    regex = re.compile(pattern, re.IGNORECASE)
    return _Pattern(regex, template, kind, slot, core, takes_rest, rest_optional)


_PATTERNS: list[_Pattern] = [
    _p(_AM + r"allergic\s+to\s+", "{n} is allergic to {x}", FactKind.CONSTRAINT),
    _p(
        _I + r"(?P<neg>can't|cannot|can not|don't|do not)\s+(?P<w>eat|drink)\s+",
        "{n} {neg} {w} {x}",
        FactKind.CONSTRAINT,
    ),
    _p(
        _AM + r"(?:an?\s+)?(?P<x>vegan|vegetarian|pescatarian|lactose intolerant|celiac)" + _END,
        "{n} is {x}",
        FactKind.CONSTRAINT,
        slot="diet",
        takes_rest=False,
    ),
    _p(
        _AM + r"(?P<w>married|single|engaged|divorced|widowed|retired|pregnant)\b\s*",
        "{n} is {w} {x}",
        FactKind.FACT,
        core=("w",),
        rest_optional=True,
    ),
    _p(
        _I + r"(?P<neg>don't|do not)\s+" + _ADV + r"(?P<w>like|love|enjoy)\s+",
        "{n} {neg} {w} {x}",
        FactKind.PREFERENCE,
    ),
    _p(
        _I + r"(?P<v>love|like|enjoy|adore|hate|dislike|prefer)\s+",
        "{n} {v} {x}",
        FactKind.PREFERENCE,
    ),
    _p(_I + r"can't\s+stand\s+", "{n} can't stand {x}", FactKind.PREFERENCE),
    _p(
        _AM + r"(?P<w>keen\s+on|interested\s+in|passionate\s+about|into|obsessed\s+with|"
        r"fond\s+of|(?:an?\s+)?(?:big\s+|huge\s+)?fan\s+of)\s+",
        "{n} is {w} {x}",
        FactKind.PREFERENCE,
    ),
    _p(
        _AM + r"(?P<w>working\s+on|building|writing|learning|studying|training\s+for|"
        r"practi[cs]ing|teaching|raising|researching|creating|developing|designing|planning|"
        r"saving\s+for|volunteering|preparing\s+for|looking\s+into|applying\s+(?:for|to))\s+",
        "{n} is {w} {x}",
        FactKind.PROJECT,
    ),
    _p(_I + r"work\s+(?P<w>at|for)\s+", "{n} works {w} {x}", FactKind.FACT, slot="employer"),
    _p(_I + r"work\s+as\s+", "{n} works as {x}", FactKind.FACT, slot="job"),
    _p(_I + r"work\s+(?P<w>in|with)\s+", "{n} works {w} {x}", FactKind.FACT),
    _p(_AM + r"from\s+", "{n} is from {x}", FactKind.FACT, slot="origin"),
    _p(
        _AM + r"(?P<x>\d{1,3})(?:\s+(?:years?|yrs?)\s+old)?" + _END,
        "{n} is {x} years old",
        FactKind.FACT,
        slot="age",
        takes_rest=False,
    ),
    _p(
        _AM + r"(?P<w>an?|the)\s+(?!(?:bit|little|tad|lot|kind\s+of|sort\s+of)\b)",
        "{n} is {w} {x}",
        FactKind.FACT,
    ),
    _p(
        _I + r"(?P<v>live|moved|relocated)\s+(?P<w>in|to|near|back\s+to)\s+",
        "{n} {v} {w} {x}",
        FactKind.FACT,
        slot="home",
    ),
    _p(
        _I + r"(?P<w>grew\s+up\s+in|was\s+born\s+in|was\s+raised\s+in)\s+",
        "{n} {w} {x}",
        FactKind.FACT,
    ),
    _p(_I + r"(?P<v>use|code\s+in|program\s+in|write\s+in)\s+", "{n} {v} {x}", FactKind.TOOL),
    _p(
        r"i\s+(?P<w>always|usually|normally|often|regularly|generally)\s+"
        r"(?!(?:am|was|were|do|did|can|could|would|will|should|have|had)\b)(?P<v>[a-z]+(?<!ed))\s+",
        "{n} {w} {v} {x}",
        FactKind.WORKFLOW,
        core=("v",),
    ),
    _p(_HAVE_BEEN + r"to\s+", "{n} has been to {x}", FactKind.FACT),
    _p(_HAVE_BEEN + r"(?P<w>[a-z]+ing)\b\s*", "{n} has been {w} {x}", FactKind.FACT, core=("w",)),
    _p(
        r"i(?:\s+have|'ve\s+got|\s+have\s+got)\s+(?P<w>an?|one|two|three|four|five|six|seven|"
        r"eight|nine|ten|\d+|some|lots\s+of|many|several|a\s+few)\s+",
        "{n} has {w} {x}",
        FactKind.FACT,
    ),
    _p(
        _I + r"(?P<v>play|paint|draw|write|run|swim|cook|bake|sing|dance|knit|sew|crochet|hike|"
        r"climb|surf|ski|skate|ride|volunteer|teach|study|practi[cs]e|collect|speak|own|attend|"
        r"coach|train|go\s+to|garden|grow|build|make)\s+",
        "{n} {v} {x}",
        FactKind.FACT,
    ),
    _p(
        _I + r"(?P<w>adopted|married|graduated\s+from|studied|got\s+(?:married|engaged)\s+to)\s+",
        "{n} {w} {x}",
        FactKind.FACT,
    ),
    _p(
        r"my\s+(?P<what>(?:[a-z'-]+\s+){0,2}?[a-z'-]+)\s+(?P<w>is|are|lives?|works?|loves?|"
        r"likes?|plays?|has|have|goes\s+to|go\s+to|studies|study|teaches|teach)\s+",
        "{ns} {what} {w} {x}",
        FactKind.FACT,
    ),
]

_SLOT_OF = re.compile(
    r"^(?P<who>(?:\S+\s+){0,3}?)(?P<verb>lives\s+in|moved\s+(?:back\s+)?to|relocated\s+to|"
    r"is\s+from|works\s+at|works\s+for|works\s+as|is\s+(?:an?\s+)?(?:vegan|vegetarian|"
    r"pescatarian|lactose intolerant|celiac)|is\s+\d{1,3}\s+years\s+old)\b",
    re.IGNORECASE,
)
_SLOT_BY_VERB = {"lives": "home", "moved": "home", "relocated": "home", "works at": "employer"}
_SLOT_BY_VERB |= {"works for": "employer", "works as": "job", "is from": "origin"}

# Text -------------------------------------------------------------------------------------

_TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
# A noun usually follows these; a verb these.
_DETERMINERS = _words(
    "a an the my your his her our their its this that these those some any no every each another"
)
_NOUN_BEFORE = _DETERMINERS | _words("of about for with in on at from into like")
# "Mel, that's great!", "Thanks, Mel!": a name between a comma or the start and a stop.
_VOCATIVE = re.compile(r"(?:^|(?<=,))\s*[A-Z][a-z]+(?=\s*[!,.?]|$)")
_GREETINGS = _words("hi hey hello thanks thank bye congrats dear yo")
_VERB_BEFORE = _words("to i you we they he she it can can't will would could should might must")
_PREFIX = re.compile(r"^\((?:reply to #\d+|edited[^)]*)\)\s*", re.IGNORECASE)
_SENTENCE_SPLIT = re.compile(r"(?<=[.!?…])\s+|\n+")
_QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")
_PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")
_CLAUSE_SPLIT = re.compile(
    r"\s*(?:[,;:()\[\]]|\s[-–—]+\s|[–—]|-\s)\s*"
    r"|\s+(?:and|but|so|because|cause|plus|while|though|although|as|since|then|or)\s+"
    r"(?=(?:i|i'm|i've|my)\b)",
    re.IGNORECASE,
)
_LEAD_IN = re.compile(
    r"^(?:(?:and|but|so|also|plus|well|oh|ah|yeah|yes|yep|yup|ok|okay|actually|honestly|"
    r"anyway|anyways|lately|recently|now|currently|btw|haha|lol|hey|hi|hello|hmm|um|uh|wow|"
    r"sure|totally|absolutely|omg|nowadays|personally|still|today|then|true|right|cool|"
    r"nice|great|awesome|these\s+days)\b[\s,!.]*)+",
    re.IGNORECASE,
)
# Where a stated object ends: punctuation, a dash, or a word that starts another clause.
_OBJECT_END = re.compile(
    r"[,;:!?()\[\]\n…]|\.(?:\s|$)|\s[-–—]+\s|[–—]|-\s"
    r"|\s(?:but|because|cause|'cause|so|which|who|whom|whose|when|while|if|unless|though|"
    r"although|until|whereas|lol|haha|i|i'm|i've|i'd|i'll|ever\s+since|"
    r"since\s+(?:we|you|he|she|they|then|last|our|my)|"
    r"and\s+(?:it|we|they|he|she|you|that|this|so|then|now|also|my))\b",
    re.IGNORECASE,
)
# A clause that sets up a hypothetical makes the rest of its sentence one too.
_HYPOTHETICAL_START = re.compile(
    r"^(?:if|unless|suppose|supposing|imagine|assuming|wish|even\s+if)\b", re.I
)
_MODAL = re.compile(
    r"\b(?:if|unless|would|could|should|might|wish|maybe|perhaps|someday|hopefully|imagine|"
    r"suppose|i'd|i'll|will|gonna|wanna)\b",
    re.IGNORECASE,
)
_REPORTED = re.compile(r"\b(?:said|says|told|tells|asked|asks|wrote|writes|texted)\b", re.I)
_TRAILING = frozenset(_STOPWORDS | {"lot", "too", "right", "though", "honestly", "now", "like"})
_WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
# The speaker's own words about themselves, in the third person: "for my team" → "for their
# team" (the name may be anyone's, so no gendered pronoun).
_SELF = re.compile(r"(?<![\w'-])(?:my|me|myself|mine)(?![\w'-])", re.IGNORECASE)
_THIRD = {"my": "their", "me": "them", "myself": "themselves", "mine": "theirs"}
_IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is", "are": "is"}
# Mentions, links and code: never part of a fact (the consolidator refuses pings anyway).
_UNSAFE = re.compile(r"[<@`]|https?:|www\.", re.IGNORECASE)


@dataclass(frozen=True)
class _Statement:
    text: str
    kind: FactKind
    slot: str | None


class RulesModel:
    name = "rules"

    def consolidate(self, batch: ModelInput) -> ConsolidationAnswer:
        known_slots = _known_slots(batch)
        facts: dict[tuple[str, str], ProposedFact] = {}
        for obs in batch.observations:
            if obs.kind not in ("msg", "edit") or len(facts) >= FACTS_PER_ANSWER:
                continue
            for statement in _statements(obs.text, _name_of(obs)):
                _propose(facts, obs, statement, known_slots)
        episode = _episode(batch)
        return ConsolidationAnswer(
            facts=list(facts.values())[:FACTS_PER_ANSWER],
            episode=episode,
            channel_summary=_rolled(batch.summary, episode.summary, batch.summary_max_chars),
        )

    def recompress(self, summary: str, target_chars: int) -> str:
        """The newest sentences that fit the target: this model summarises by appending."""
        return _newest_sentences(summary, target_chars)


def _rolled(summary: str, episode: str, max_chars: int) -> str:
    """The channel summary with the batch's episode appended, oldest sentences dropped to
    stay within the cap."""
    return _newest_sentences(f"{summary} {episode}".strip(), max_chars)


def _newest_sentences(text: str, max_chars: int) -> str:
    sentences = [s for s in _SENTENCE_END.split(text.strip()) if s]
    kept: list[str] = []
    used = 0
    for sentence in reversed(sentences):
        if used + len(sentence) + (1 if kept else 0) > max_chars:
            break
        kept.insert(0, sentence)
        used += len(sentence) + (1 if len(kept) > 1 else 0)
    return " ".join(kept)


def _propose(
    facts: dict[tuple[str, str], ProposedFact],
    obs: NumberedObservation,
    statement: _Statement,
    known_slots: dict[tuple[str, str], str],
) -> None:
    """Add a fact, or cite one more message for a fact already proposed."""
    key = (obs.author_id, statement.text.casefold())
    same = facts.get(key)
    if same is not None:
        if obs.number not in same.evidence and len(same.evidence) < _MAX_EVIDENCE:
            same.evidence.append(obs.number)
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
    )


# Words of health and safety: a fact that holds one is kept before any other of its round.
_SAFETY = re.compile(
    r"\b(?:allerg\w*|anaphyla\w*|epipen|asthma\w*|diabet\w*|epilep\w*|seizures?|"
    r"celiac|coeliac|intoleran\w*|medication|medicines?|insulin|inhaler|pregnan\w*|"
    r"disab\w*|wheelchair|deaf|blind|heart condition)\b",
    re.IGNORECASE,
)
_IDENTITY_SLOTS = frozenset({"home", "job", "employer", "origin", "age"})


def _priority_of(statement: _Statement) -> FactPriority:
    """Health and safety first, then who the person is, what they are working on, the rest."""
    if _SAFETY.search(statement.text):
        return FactPriority.SAFETY
    if statement.slot in _IDENTITY_SLOTS or statement.kind == FactKind.PERSON:
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
    match = _SLOT_OF.match(text.strip())
    if not match or re.search(r"['’]s\b", match["who"]):  # "Alice's mum lives in ..."
        return None
    verb = " ".join(match["verb"].lower().split())
    if verb.startswith("is ") and verb != "is from":
        return "age" if verb.endswith("old") else "diet"
    return _SLOT_BY_VERB.get(verb) or _SLOT_BY_VERB.get(verb.split()[0])


# Facts --------------------------------------------------------------------------------------


def _statements(text: str, name: str) -> list[_Statement]:
    """The facts one message states about its author, in order, one per clause at most and
    at most FACTS_PER_OBSERVATION."""
    found: list[_Statement] = []
    for clause, quotes in _clauses(text):
        statement = _statement(clause, quotes, name)
        if statement is None or behaviour_request(statement.text):
            continue  # "I prefer to be called master" asks the bot something: not a fact
        if all(s.text.casefold() != statement.text.casefold() for s in found):
            found.append(statement)
            if len(found) == FACTS_PER_OBSERVATION:
                break
    return found


def _clauses(text: str) -> Iterator[tuple[str, list[str]]]:
    """Clauses that may state something: not in a question, a quote, reported speech or a
    hypothetical. Quoted spans are masked so that their words never start a statement."""
    # Markdown emphasis ("I **love** pottery") is not part of the words.
    body = _PREFIX.sub("", text.replace("’", "'").replace("*", "").replace("~~", "").strip())
    for line in body.splitlines():
        if line.lstrip().startswith(">") or "```" in line:
            continue  # a Discord quote or code: someone else's words, or not prose
        masked, quotes = _masked(line)
        for sentence in _SENTENCE_SPLIT.split(masked):
            yield from ((clause, quotes) for clause in _sentence_clauses(sentence))


def _masked(line: str) -> tuple[str, list[str]]:
    """The line with each quoted span replaced by a numbered placeholder, and the spans."""
    quotes: list[str] = []

    def mask(match: re.Match[str]) -> str:
        quotes.append(match.group(0))
        # A quote that ends its sentence ("... called "Home." It is ...") still ends it.
        end = match.group(0)[-2:-1] if match.group(0)[-2:-1] in (".", "!") else ""
        return f"\ue000{len(quotes) - 1}\ue001{end}"

    return _QUOTED.sub(mask, line), quotes


def _sentence_clauses(sentence: str) -> Iterator[str]:
    if re.search(r"\?\W*$", sentence) or _REPORTED.search(sentence) or _UNSAFE.search(sentence):
        return  # a question states nothing; reported speech is someone else's words
    for part in _CLAUSE_SPLIT.split(sentence):
        clause = _LEAD_IN.sub("", part.strip())
        if _HYPOTHETICAL_START.match(clause):
            return  # the rest of the sentence is conditional
        if clause[:2].lower() in ("i ", "i'", "my") and not _MODAL.search(clause):
            yield clause


def _statement(clause: str, quotes: list[str], name: str) -> _Statement | None:
    for pattern in _PATTERNS:
        match = pattern.regex.match(clause)
        if match:
            statement = _render(pattern, match, clause, quotes, name)
            if statement:
                return statement
    return None


def _render(
    pattern: _Pattern, match: re.Match[str], clause: str, quotes: list[str], name: str
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
    return _Statement(text=text, kind=kind, slot=pattern.slot)


def _object(rest: str, quotes: list[str]) -> str | None:
    """The stated object: up to the clause's end, quotes restored, fillers trimmed, cut to
    fit a short fact. None when it is about the listener ("a big fan of yours")."""
    said = rest[: end.start()] if (end := _OBJECT_END.search(rest)) else rest
    if _SECOND_PERSON.intersection(w.lower() for w in _WORD.findall(said)):
        return None
    text = _SELF.sub(lambda m: _THIRD[m.group(0).lower()], said)
    # Quotes come back last, whole: their own words and punctuation are as said.
    text = _PLACEHOLDER.sub(lambda m: quotes[int(m.group(1))], _trimmed(text.split()))
    if len(text) > FACT_CHARS - 60:  # leave room for the name and the verb
        text = _trimmed(text[: FACT_CHARS - 60].split()[:-1])
    return text


def _trimmed(words: list[str]) -> str:
    """The words without trailing fillers ("pottery too", "a safe and")."""
    while words and words[-1].lower().strip("'.!") in _TRAILING:
        words.pop()
    return " ".join(words).rstrip(".!").strip()


def _said_enough(pattern: _Pattern, groups: dict[str, str], rest: str) -> bool:
    """The object names something: it opens with no pronoun, is not about the listener,
    and holds a word that is neither a stopword nor vague."""
    core = " ".join([groups[g] for g in pattern.core if g in groups] + [rest])
    if not pattern.takes_rest:
        core = groups.get("x", "")
    words = [w.lower() for w in _WORD.findall(core)]
    if not words:
        return False
    if _MOOD.match(rest) or _pronoun_object(rest or core):
        return False
    if "what" in groups and not _about_the_speaker(groups, words):
        return False
    opening = [w for w in _WORD.findall(rest.lower()) if w not in _STOPWORDS][:2]
    if len(opening) == 2 and all(w in _VAGUE for w in opening):
        return False  # "a great time doing walks", "a bit of a drag"
    return any(w not in _STOPWORDS and w not in _VAGUE for w in words)


def _pronoun_object(text: str) -> bool:
    """ "doing it for years", "working on that", "love this": a pronoun or a bare
    determiner where the object should be ("this song" names something)."""
    words = [w.lower() for w in _WORD.findall(text)]
    while words and words[0] in _PREPOSITIONS:
        words.pop(0)
    if not words:
        return False
    if words[0] in _DEMONSTRATIVES:
        following = words[1] if len(words) > 1 else ""
        return not following or following in _STOPWORDS or following in _VAGUE
    return words[0] in _BAD_OPENERS


def _about_the_speaker(groups: dict[str, str], complement: list[str]) -> bool:
    """ "My X is Y" keeps: X a plain noun phrase, no secret or idiom, Y no passing mood;
    "my X lives in Y" only when X is family, a friend or a pet."""
    heads = groups["what"].lower().split()
    if any(w in _STOPWORDS or w in _MY_NOT for w in heads):
        return False
    if groups["w"].lower() not in ("is", "are") and heads[-1] not in _FAMILY:
        return False
    return complement[0] not in _INTENSIFIERS


def _fields(groups: dict[str, str], rest: str, name: str) -> dict[str, str]:
    fields = dict(groups)
    fields["n"], fields["ns"], fields["x"] = name, f"{name}'s", rest or fields.get("x", "")
    if "v" in groups:
        fields["v"] = _third_person(groups["v"])
    if "neg" in groups:
        fields["neg"] = _NEG[groups["neg"].lower()]
    if "w" in groups:
        fields["w"] = groups["w"].lower() if not groups["w"].isdigit() else groups["w"]
    return fields


def _kind_of(pattern: _Pattern, groups: dict[str, str]) -> FactKind:
    what = groups.get("what", "").lower().split()
    if not what:
        return pattern.kind
    if what[0] in ("favourite", "favorite", "fave"):
        return FactKind.PREFERENCE
    return FactKind.PERSON if what[-1] in _FAMILY else pattern.kind


def _third_person(verb: str) -> str:
    """I love → loves, I have → has, I go to → goes to; a past form stays as it is."""
    head, _, tail = verb.lower().partition(" ")
    if head in _IRREGULAR:
        head = _IRREGULAR[head]
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
    return sum(1 for w in _WORD.findall(text) if w.lower() not in _STOPWORDS)


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
        for sentence in _SENTENCE_SPLIT.split(_PREFIX.sub("", text.replace("’", "'"))):
            sentence = _VOCATIVE.sub(" ", sentence)
            named |= _scan([m.group(0) for m in _TOKEN.finditer(sentence)], name_parts, found)
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
        if not topical[i] or before in _GREETINGS:  # "Thanks Mel": an addressee, not a topic
            continue
        pair = f"{before} {key}" if i and topical[i - 1] else None
        opener = keys[i - 2] if pair and i > 1 else before
        # A word right before another topic word modifies it ("grand opening"): no noun.
        head = not topical[i + 1]
        for term in (key, pair) if pair else (key,):
            named.add(term)
            found.first.setdefault(term, len(found.first))
            found.nounish[term] += head and _noun_after(opener, term, tokens[i], i)
        found.verbish[key] += before in _VERB_BEFORE
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
        return opener in _DETERMINERS
    return opener in _NOUN_BEFORE


def _topical(key: str, name_parts: set[str]) -> bool:
    if len(key) < 3 or "'" in key or key in _NOT_TOPICS:
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
