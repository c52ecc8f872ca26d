"""The word lists and patterns of the offline memory model (botmemory.consolidation.model.rules).

What it recognises, as data: stopwords, vague words and words that are never a topic; the
first-person statements it turns into facts, each with its template, kind and slot; the
patterns that cut a message into sentences and clauses and find where a stated object ends;
and the words of health and safety that put a fact first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from botmemory.records import FactKind

# Where the channel summary is cut into sentences (after a full stop and a space).
SENTENCE_END = re.compile(r"(?<=[.!?])\s+")

# Word lists -------------------------------------------------------------------------------


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


STOPWORDS = _words(
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
VAGUE = _words(
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
NOT_TOPICS = (
    STOPWORDS
    | VAGUE
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
MY_NOT = _words(
    """password passwords passcode pin ssn address email phone number card account login
    username name mind heart point bad pleasure guess question turn day week morning night
    weekend god goodness gosh head brain bet fault word apologies condolences"""
)
FAMILY = _words(
    """wife husband partner spouse boyfriend girlfriend fiance fiancee son sons daughter
    daughters kid kids child children baby mom mother mum dad father parents brother brothers
    sister sisters siblings grandma grandmother grandpa grandfather grandparents aunt uncle
    cousin cousins niece nephew friend friends family dog dogs cat cats pet pets puppy
    kitten"""
)
# Words that open an object about the listener, a pronoun or nothing at all.
BAD_OPENERS = _words(
    """it it's its that's them they he she him her his you your
    yours me us we what how when where why who which so too very much there here such
    same what's whatever sure one"""
)
SECOND_PERSON = _words("you your yours you're you've you'll ya u")
# An object opening with these is a passing mood or a compliment, not a fact about the speaker:
# "I always feel so peaceful", "I've been feeling a bit stressed", "I love the way it turned".
MOOD = re.compile(
    r"^(?:so|very|really|super|too|pretty|quite|such|kinda|(?:a\s+)?(?:bit|little)|"
    r"(?:kind|sort)\s+of|the\s+(?:way|fact|idea|thought|feeling|vibes?|look|sound)s?)\b",
    re.IGNORECASE,
)
PREPOSITIONS = _words("on in at about with for to into of from out up over")
DEMONSTRATIVES = _words("this that these those")
# Complements that describe a mood, not the person: "my kids are so excited".
INTENSIFIERS = _words(
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
NEG = {"can't": "can't", "cannot": "cannot", "can not": "cannot"}
NEG |= {"don't": "doesn't", "do not": "does not"}


@dataclass(frozen=True)
class Pattern:
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
    # A passing state ("I'm in Tokyo"): kept only with the day it ends (botmemory.when).
    passing: bool = False


def _p(
    pattern: str,
    template: str,
    kind: FactKind,
    *,
    slot: str | None = None,
    core: tuple[str, ...] = (),
    takes_rest: bool = True,
    rest_optional: bool = False,
    passing: bool = False,
) -> Pattern:
    regex = re.compile(pattern, re.IGNORECASE)
    return Pattern(regex, template, kind, slot, core, takes_rest, rest_optional, passing)


PATTERNS: list[Pattern] = [
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
    # Passing states, last: said with the day they end ("I'm in Tokyo until Friday", "I'm
    # away, back on Monday") they are facts until then; without one, nothing durable.
    _p(
        _AM + r"(?P<w>away|abroad|travell?ing|working\s+(?:from\s+home|remotely)|"
        r"on\s+(?:holiday|vacation|leave|a\s+trip)|"
        r"off\s+(?:work|sick)|out\s+of\s+(?:town|the\s+office|office))\b",
        "{n} is {w} {x}",
        FactKind.FACT,
        core=("w",),
        rest_optional=True,
        passing=True,
    ),
    _p(
        _AM + r"(?P<w>in|at|visiting|staying\s+(?:in|at|with))\s+",
        "{n} is {w} {x}",
        FactKind.FACT,
        passing=True,
    ),
]

SLOT_OF = re.compile(
    r"^(?P<who>(?:\S+\s+){0,3}?)(?P<verb>lives\s+in|moved\s+(?:back\s+)?to|relocated\s+to|"
    r"is\s+from|works\s+at|works\s+for|works\s+as|is\s+(?:an?\s+)?(?:vegan|vegetarian|"
    r"pescatarian|lactose intolerant|celiac)|is\s+\d{1,3}\s+years\s+old)\b",
    re.IGNORECASE,
)
SLOT_BY_VERB = {"lives": "home", "moved": "home", "relocated": "home", "works at": "employer"}
SLOT_BY_VERB |= {"works for": "employer", "works as": "job", "is from": "origin"}

# Text -------------------------------------------------------------------------------------

TOKEN = re.compile(r"[A-Za-z][A-Za-z'-]*[A-Za-z]|[A-Za-z]")
# A noun usually follows these; a verb these.
DETERMINERS = _words(
    "a an the my your his her our their its this that these those some any no every each another"
)
NOUN_BEFORE = DETERMINERS | _words("of about for with in on at from into like")
# "Mel, that's great!", "Thanks, Mel!": a name between a comma or the start and a stop.
VOCATIVE = re.compile(r"(?:^|(?<=,))\s*[A-Z][a-z]+(?=\s*[!,.?]|$)")
GREETINGS = _words("hi hey hello thanks thank bye congrats dear yo")
VERB_BEFORE = _words("to i you we they he she it can can't will would could should might must")
PREFIX = re.compile(r"^\((?:reply to #\d+|edited[^)]*)\)\s*", re.IGNORECASE)
SENTENCE_SPLIT = re.compile(r"(?<=[.!?…])\s+|\n+")
QUOTED = re.compile(r"\"[^\"]*\"|“[^”]*”")
PLACEHOLDER = re.compile("\ue000(\\d+)\ue001")
CLAUSE_SPLIT = re.compile(
    r"\s*(?:[,;:()\[\]]|\s[-–—]+\s|[–—]|-\s)\s*"
    r"|\s+(?:and|but|so|because|cause|plus|while|though|although|as|since|then|or)\s+"
    r"(?=(?:i|i'm|i've|my)\b)",
    re.IGNORECASE,
)
LEAD_IN = re.compile(
    r"^(?:(?:and|but|so|also|plus|well|oh|ah|yeah|yes|yep|yup|ok|okay|actually|honestly|"
    r"anyway|anyways|lately|recently|now|currently|btw|haha|lol|hey|hi|hello|hmm|um|uh|wow|"
    r"sure|totally|absolutely|omg|nowadays|personally|still|today|then|true|right|cool|"
    r"nice|great|awesome|these\s+days)\b[\s,!.]*)+",
    re.IGNORECASE,
)
# Where a stated object ends: punctuation, a dash, or a word that starts another clause.
OBJECT_END = re.compile(
    r"[,;:!?()\[\]\n…]|\.(?:\s|$)|\s[-–—]+\s|[–—]|-\s"
    r"|\s(?:but|because|cause|'cause|so|which|who|whom|whose|when|while|if|unless|though|"
    r"although|until|till|'?til|whereas|lol|haha|i|i'm|i've|i'd|i'll|ever\s+since|"
    r"since\s+(?:we|you|he|she|they|then|last|our|my)|"
    r"and\s+(?:it|we|they|he|she|you|that|this|so|then|now|also|my))\b",
    re.IGNORECASE,
)
# A clause that sets up a hypothetical makes the rest of its sentence one too.
HYPOTHETICAL_START = re.compile(
    r"^(?:if|unless|suppose|supposing|imagine|assuming|wish|even\s+if)\b", re.I
)
MODAL = re.compile(
    r"\b(?:if|unless|would|could|should|might|wish|maybe|perhaps|someday|hopefully|imagine|"
    r"suppose|i'd|i'll|will|gonna|wanna)\b",
    re.IGNORECASE,
)
REPORTED = re.compile(r"\b(?:said|says|told|tells|asked|asks|wrote|writes|texted)\b", re.I)
TRAILING = frozenset(STOPWORDS | {"lot", "too", "right", "though", "honestly", "now", "like"})
WORD = re.compile(r"[A-Za-z0-9][\w'-]*")
# The speaker's own words about themselves, in the third person: "for my team" → "for their
# team" (the name may be anyone's, so no gendered pronoun).
SELF = re.compile(r"(?<![\w'-])(?:my|me|myself|mine)(?![\w'-])", re.IGNORECASE)
THIRD = {"my": "their", "me": "them", "myself": "themselves", "mine": "theirs"}
IRREGULAR = {"have": "has", "do": "does", "go": "goes", "be": "is", "am": "is", "are": "is"}
# Mentions, links and code: never part of a fact (the consolidator refuses pings anyway).
UNSAFE = re.compile(r"[<@`]|https?:|www\.", re.IGNORECASE)


# Words of health and safety: a fact that holds one is kept before any other of its round.
SAFETY = re.compile(
    r"\b(?:allerg\w*|anaphyla\w*|epipen|asthma\w*|diabet\w*|epilep\w*|seizures?|"
    r"celiac|coeliac|intoleran\w*|medication|medicines?|insulin|inhaler|pregnan\w*|"
    r"disab\w*|wheelchair|deaf|blind|heart condition)\b",
    re.IGNORECASE,
)
IDENTITY_SLOTS = frozenset({"home", "job", "employer", "origin", "age"})
