"""The offline rules model: clear first-person statements only, in the third person,
deterministic; episodes that name the topics instead of quoting lines."""

from __future__ import annotations

import time

import pytest

from botmemory.consolidation.model.contract import (
    KnownFact,
    ModelInput,
    NumberedObservation,
    ProposedEpisode,
)
from botmemory.consolidation.model.rules import (
    EPISODE_CHARS,
    FACT_CHARS,
    FACTS_PER_ANSWER,
    FACTS_PER_OBSERVATION,
    RulesModel,
)
from botmemory.records import FactKind
from botmemory.settings.config import Settings


def batch(
    *lines: tuple[str, str], facts: list[KnownFact] | None = None, kind: str = "msg"
) -> ModelInput:
    """Observations #1..#n; each author's id is their name in lower case."""
    return ModelInput(
        channel_id="1",
        observations=[
            NumberedObservation(
                number=i + 1, author_id=name.lower(), author_name=name, kind=kind, text=text
            )
            for i, (name, text) in enumerate(lines)
        ],
        facts=facts or [],
    )


def facts_of(text: str, name: str = "Caroline") -> list[str]:
    return [f.text for f in RulesModel().consolidate(batch((name, text))).facts]


# Statements that are facts, word for word. ----------------------------------------------------

STATED = [
    # The brief's own examples.
    ("Caroline", "I love pottery", "Caroline loves pottery"),
    ("Caroline", "I'm a nurse", "Caroline is a nurse"),
    ("Caroline", "I am a nurse.", "Caroline is a nurse"),
    ("Caroline", "my daughter is 5", "Caroline's daughter is 5"),
    ("Caroline", "I moved to Boston last year", "Caroline moved to Boston last year"),
    ("Melanie", "I've been painting for 3 years", "Melanie has been painting for 3 years"),
    ("Melanie", "I have been painting for 3 years.", "Melanie has been painting for 3 years"),
    ("Caroline", "I work at the General Hospital.", "Caroline works at the General Hospital"),
    ("Caroline", "my favourite band is Radiohead", "Caroline's favourite band is Radiohead"),
    ("Bob", "I have two kids", "Bob has two kids"),
    # Real turns of LoCoMo conversations (leading small talk and trailing clauses dropped).
    (
        "Melanie",
        "I'm a big fan of pottery - the creativity and skill is awesome.",
        "Melanie is a big fan of pottery",
    ),
    (
        "Caroline",
        "Lately, I've been looking into counseling and mental health as a career.",
        "Caroline has been looking into counseling and mental health as a career",
    ),
    (
        "Caroline",
        "Thanks, Mel! My goal is to give kids a loving home.",
        "Caroline's goal is to give kids a loving home",
    ),
    (
        "Caroline",
        "I'm keen on counseling or working in mental health - I'd love to support those with similar issues.",
        "Caroline is keen on counseling or working in mental health",
    ),
    (
        "Joanna",
        "I'm allergic to most reptiles and animals with fur. It can be a bit of a drag.",
        "Joanna is allergic to most reptiles and animals with fur",
    ),
    ("Melanie", "Yeah, I play clarinet! Started when I was young.", "Melanie plays clarinet"),
    (
        "Evan",
        "Wanted to share some amazing news - my partner is pregnant!",
        "Evan's partner is pregnant",
    ),
    (
        "Dave",
        "I'm obsessed with classic cars. They have a unique charm.",
        "Dave is obsessed with classic cars",
    ),
    (
        "Melanie",
        "I've been running farther to de-stress, which has been great for my headspace.",
        "Melanie has been running farther to de-stress",
    ),
    (
        "Gina",
        "Wow, Jon! Mentors can really help. I'm working on my online store, growing the customer base.",
        "Gina is working on their online store",
    ),
    ("Andrew", "No, no pets right now. But I do love animals.", "Andrew loves animals"),
    ("Alice", "Hi Bob! I love playing the cello.", "Alice loves playing the cello"),
    ("Bob", "Nice! I work as a carpenter these days.", "Bob works as a carpenter these days"),
    ("Bob", "I adopted a puppy named Biscuit.", "Bob adopted a puppy named Biscuit"),
    (
        "Caroline",
        'My favorite book is "Becoming Nicole" by Amy Ellis Nutt.',
        'Caroline\'s favorite book is "Becoming Nicole" by Amy Ellis Nutt',
    ),
    # Verb agreement and the rest of the repertoire.
    ("Caroline", "I really enjoy hiking in the Alps.", "Caroline enjoys hiking in the Alps"),
    ("Caroline", "I prefer tea over coffee", "Caroline prefers tea over coffee"),
    ("Caroline", "I hate mornings", "Caroline hates mornings"),
    ("Caroline", "I don't really like horror movies", "Caroline doesn't like horror movies"),
    ("Caroline", "I can't eat gluten", "Caroline can't eat gluten"),
    ("Caroline", "I'm vegan", "Caroline is vegan"),
    ("Caroline", "I'm 32", "Caroline is 32 years old"),
    ("Caroline", "I'm married to Tom", "Caroline is married to Tom"),
    ("Caroline", "I'm originally from Sweden", "Caroline is from Sweden"),
    ("Caroline", "I grew up in Cork", "Caroline grew up in Cork"),
    ("Caroline", "I live in Lyon, near the river.", "Caroline lives in Lyon"),
    ("Caroline", "I'm studying biology at Trinity", "Caroline is studying biology at Trinity"),
    (
        "Caroline",
        "I'm passionate about helping people.",
        "Caroline is passionate about helping people",
    ),
    ("Caroline", "I use Neovim for everything.", "Caroline uses Neovim for everything"),
    ("Caroline", "I usually go running before work", "Caroline usually goes running before work"),
    ("Caroline", "I teach yoga on weekends", "Caroline teaches yoga on weekends"),
    ("Caroline", "I speak French and Spanish", "Caroline speaks French and Spanish"),
    ("Caroline", "I've been to Japan twice", "Caroline has been to Japan twice"),
    ("Caroline", "I have a dog named Max", "Caroline has a dog named Max"),
    ("Caroline", "My brother lives in Paris", "Caroline's brother lives in Paris"),
    ("Caroline", "I'm the oldest of three kids.", "Caroline is the oldest of three kids"),
    # Their own words about themselves, in the third person; fillers at the end dropped.
    (
        "Caroline",
        "I'm working on a new app for my team.",
        "Caroline is working on a new app for their team",
    ),
    ("Caroline", "I love pottery too!", "Caroline loves pottery"),
    ("Caroline", "(reply to #3) I love hiking", "Caroline loves hiking"),
    ("Caroline", "(edited #2) I love hiking", "Caroline loves hiking"),
    ("Caroline", "i love pottery lol", "Caroline loves pottery"),
    ("Caroline", "I’m a nurse", "Caroline is a nurse"),
]


@pytest.mark.parametrize(("name", "said", "fact"), STATED)
def test_a_first_person_statement_becomes_exactly_this_fact(
    name: str, said: str, fact: str
) -> None:
    assert facts_of(said, name) == [fact]


# Messages that state nothing worth keeping. --------------------------------------------------

UNSTATED = [
    "Likes it",
    "Likes to",
    "I like it",
    "I like it!",
    "I love that",
    "I love this",
    "I want to",
    "I love to",
    "I like things",
    "Thanks so much, Melanie!",
    "Hey Caroline! Good to see you!",
    "Do you like pottery?",
    "I love pottery, do you?",
    "If I had a dog I'd walk it every day.",
    "If I lived in Paris, I love croissants.",
    "I wish I was a nurse",
    "I would love a dog",
    "I'd love to try pottery",
    "Maybe I'm a nurse",
    "My dad when I was a kid used to take me fishing.",
    "Their dad when I was a kid, we'd go through the fields.",
    "Melanie loves pottery and she is a nurse.",
    "Alice likes sushi, by the way.",
    "She lives in Paris.",
    'He said "I love pottery" yesterday.',
    '"I love pottery," she said.',
    "She told me I'm a great painter.",
    "> I love pottery",
    "I love you",
    "I love your paintings!",
    "I'm a big fan of yours!",
    "That's great, Caroline! I love that you chose pottery for your art.",
    "It reminds me why I love being a mom.",
    "I'm so happy",
    "I'm so excited for you!",
    "I'm a bit nervous",
    "I'm not a nurse",
    "I'm not sure about that",
    "I don't know",
    "I don't like it",
    "I have a question",
    "I have a lot going on",
    "I've been going through a lot",
    "I've been thinking about it",
    "I've been there",
    "I've been doing it for a few years",
    "I always feel so peaceful and serene when I'm there.",
    "I love the way it turned out!",
    "My kids are so excited about summer break!",
    "My life is great",
    "my password is hunter2",
    "My name is Bob",
    "my kids and I are going camping",
    "I'm lucky to have my husband and kids; they keep me motivated.",
    "I'm off to go swimming with the kids. Talk to you soon!",
    "I went to a LGBTQ support group yesterday and it was so powerful.",
    "I love <@123456789012345678> so much",
    "I use https://example.com for that",
    "",
]


@pytest.mark.parametrize("said", UNSTATED)
def test_a_message_without_a_clear_statement_gives_no_fact(said: str) -> None:
    assert facts_of(said) == []


def test_every_fact_is_one_sentence_of_at_least_two_content_words_within_the_length() -> None:
    long_object = "I love " + " ".join(f"pottery{i}" for i in range(200))
    answer = RulesModel().consolidate(
        batch(*[("Caroline", said) for _, said, _ in STATED], ("Caroline", long_object))
    )

    assert answer.facts
    for fact in answer.facts:
        assert len(fact.text) <= FACT_CHARS
        assert fact.text.startswith("Caroline")
        assert "\n" not in fact.text and not fact.text.endswith((",", " and", " to"))


# Evidence, kinds, caps. ---------------------------------------------------------------------


def test_facts_cite_only_their_speakers_own_message_and_keep_their_kind() -> None:
    answer = RulesModel().consolidate(
        batch(
            ("Alice", "Hi all! I'm a nurse and I love hiking in the Alps."),
            ("Bob", "Alice likes sushi, by the way."),
            ("Bob", "Do you like jazz?"),
            ("Bob", "I use Neovim for everything. I'm allergic to peanuts."),
            ("Alice", "My sister is a doctor. My favourite food is ramen."),
        )
    )

    got = {(f.user_id, f.text, f.kind, tuple(f.evidence)) for f in answer.facts}
    assert got == {
        ("alice", "Alice is a nurse", FactKind.FACT, (1,)),
        ("alice", "Alice loves hiking in the Alps", FactKind.PREFERENCE, (1,)),
        ("bob", "Bob uses Neovim for everything", FactKind.TOOL, (4,)),
        ("bob", "Bob is allergic to peanuts", FactKind.CONSTRAINT, (4,)),
        ("alice", "Alice's sister is a doctor", FactKind.PERSON, (5,)),
        ("alice", "Alice's favourite food is ramen", FactKind.PREFERENCE, (5,)),
    }


def test_a_fact_restated_in_another_message_cites_both_messages_once() -> None:
    answer = RulesModel().consolidate(
        batch(
            ("Alice", "I love pottery."), ("Bob", "I love pottery."), ("Alice", "I love pottery!")
        )
    )

    assert [(f.user_id, f.text, f.evidence) for f in answer.facts] == [
        ("alice", "Alice loves pottery", [1, 3]),
        ("bob", "Bob loves pottery", [2]),
    ]


def test_a_message_gives_at_most_two_facts_and_an_answer_at_most_forty() -> None:
    wall = "; ".join(f"I like thing {i}" for i in range(25))
    one = RulesModel().consolidate(batch(("Mallory", wall)))
    many = RulesModel().consolidate(
        batch(*[("Mallory", wall.replace("thing", f"t{w}x")) for w in range(30)])
    )

    assert FACTS_PER_OBSERVATION == 2 and FACTS_PER_ANSWER == 40
    assert [f.text for f in one.facts] == ["Mallory likes thing 0", "Mallory likes thing 1"]
    assert len(many.facts) == FACTS_PER_ANSWER


def test_only_messages_and_edits_state_facts() -> None:
    for kind, expected in (("msg", 1), ("edit", 1), ("bot", 0), ("react", 0)):
        answer = RulesModel().consolidate(batch(("Alice", "I love pottery"), kind=kind))
        assert len(answer.facts) == expected, kind


def test_the_name_is_the_authors_as_the_batch_gives_it() -> None:
    answer = RulesModel().consolidate(
        ModelInput(
            channel_id="1",
            observations=[
                NumberedObservation(
                    number=1,
                    author_id="42",
                    author_name="  Dr.  Who ",
                    kind="msg",
                    text="I'm a doctor",
                ),
                NumberedObservation(
                    number=2, author_id="43", author_name="", kind="msg", text="I'm a pilot"
                ),
            ],
        )
    )

    assert [f.text for f in answer.facts] == ["Dr. Who is a doctor", "43 is a pilot"]


# Supersession of single-valued facts. ----------------------------------------------------------


@pytest.mark.parametrize("old", ["Lives in Lyon", "Alice lives in Lyon", "Alice moved to Lyon"])
def test_a_new_home_supersedes_the_known_one_whatever_its_wording(old: str) -> None:
    known = [KnownFact(fact_id="abc", user_id="alice", kind="fact", text=old)]

    answer = RulesModel().consolidate(batch(("Alice", "I moved to Berlin last week."), facts=known))

    (fact,) = answer.facts
    assert fact.text == "Alice moved to Berlin last week"
    assert fact.supersedes == ["abc"]


def test_only_the_speakers_own_fact_of_the_same_slot_is_superseded() -> None:
    known = [
        KnownFact(fact_id="mum", user_id="alice", kind="person", text="Alice's mum lives in Lyon"),
        KnownFact(fact_id="bob", user_id="bob", kind="fact", text="Bob lives in Lyon"),
        KnownFact(fact_id="job", user_id="alice", kind="fact", text="Alice works at Acme"),
        KnownFact(fact_id="age", user_id="alice", kind="fact", text="Alice is 31 years old"),
    ]

    answer = RulesModel().consolidate(
        batch(
            ("Alice", "I live in Paris now. I'm 32."), ("Alice", "I work at Initech"), facts=known
        )
    )

    assert [(f.text, f.supersedes) for f in answer.facts] == [
        ("Alice lives in Paris", []),
        ("Alice is 32 years old", ["age"]),
        ("Alice works at Initech", ["job"]),
    ]


# Episodes. -----------------------------------------------------------------------------------

CONVERSATION = [
    ("Caroline", "Hey Melanie! Thanks so much for the pottery pics!"),
    ("Melanie", "Thanks so much, Caroline! I just signed up for a pottery class yesterday."),
    ("Caroline", "Wow, Mel! A pottery class sounds like therapy."),
    ("Melanie", "I ran a charity race for mental health last Saturday."),
    ("Caroline", "A charity race for mental health? That's amazing!"),
    ("Melanie", "Thanks! How is the adoption going?"),
    ("Caroline", "The adoption agency called me back. The adoption interview is next week."),
]


def test_the_episode_names_what_was_discussed_and_who_took_part() -> None:
    answer = RulesModel().consolidate(batch(*CONVERSATION))

    assert answer.episode.participants == ["caroline", "melanie"]
    assert answer.episode.summary == (
        "Caroline and Melanie talked about pottery class, mental health, charity race and adoption."
    )


def test_the_episode_quotes_no_line_and_names_no_greeting_or_participant_as_a_topic() -> None:
    summary = RulesModel().consolidate(batch(*CONVERSATION)).episode.summary
    topics = summary.split(" talked about ", 1)[1]

    assert "\u201c" not in summary and '"' not in summary
    for line in (text for _, text in CONVERSATION):
        assert line not in summary
    for word in ("Thanks", "Hey", "Wow", "Caroline", "Melanie", "Mel", "amazing", "sounds"):
        assert word not in topics


def test_the_episode_stays_within_its_length_however_many_people_and_words() -> None:
    people = [f"Participant{i}{'x' * 60}" for i in range(12)]
    lines = [(p, f"We saw the {chr(97 + i) * 70}topic again.") for i, p in enumerate(people)]

    episode = RulesModel().consolidate(batch(*lines)).episode

    assert len(episode.summary) <= EPISODE_CHARS <= Settings().episode_chars
    assert ProposedEpisode.model_validate(episode.model_dump()) == episode
    assert "and 8 others talked about" in episode.summary
    assert episode.summary.endswith(".")


def test_a_batch_without_topics_still_says_who_talked() -> None:
    answer = RulesModel().consolidate(
        batch(("Alice", "Hi!"), ("Bob", "Thanks, Alice!"), ("Alice", "ok"))
    )

    assert answer.episode.summary == "Alice and Bob chatted briefly."


def test_the_episode_of_the_bot_alone_names_the_bot_and_its_topic() -> None:
    answer = RulesModel().consolidate(
        batch(("Bot", "The garden needs tomatoes. Plant the tomatoes in spring."), kind="bot")
    )

    assert answer.episode.participants == []
    assert answer.episode.summary.startswith("The bot talked about tomatoes")


def test_the_answer_is_deterministic() -> None:
    conversation = batch(*CONVERSATION, ("Alice", "I love pottery and I'm a nurse."))

    assert RulesModel().consolidate(conversation) == RulesModel().consolidate(conversation)


def test_the_model_stays_fast_on_long_and_hostile_messages() -> None:
    ordinary = [("Caroline", text) for _, text in CONVERSATION] * 150
    hostile = [
        ("Mallory", "I love " + "a " * 7000),
        ("Mallory", "my " + "very " * 3000 + "is great"),
        ("Mallory", '"' * 16000),
        ("Mallory", "Yeah, " * 2500 + "I love it"),
    ]

    started = time.perf_counter()
    for start in range(0, len(ordinary), 50):
        RulesModel().consolidate(batch(*ordinary[start : start + 50]))
    ordinary_ms = (time.perf_counter() - started) * 1000 / len(ordinary)
    started = time.perf_counter()
    RulesModel().consolidate(batch(*hostile))
    hostile_ms = (time.perf_counter() - started) * 1000

    # Generous bounds (about 0.2 ms and 40 ms here): they catch a regex that backtracks.
    assert ordinary_ms < 5
    assert hostile_ms < 2000
