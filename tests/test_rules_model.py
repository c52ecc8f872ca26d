"""The offline rules model: explicit first-person statements only, deterministic."""

from __future__ import annotations

from botmemory.memory_model.contract import KnownFact, ModelInput, NumberedObservation
from botmemory.memory_model.rules import RulesModel


def batch(*lines: tuple[str, str], facts: list[KnownFact] | None = None) -> ModelInput:
    return ModelInput(
        channel_id="1",
        observations=[
            NumberedObservation(
                number=i + 1, author_id=author, author_name=author.title(), kind="msg", text=text
            )
            for i, (author, text) in enumerate(lines)
        ],
        facts=facts or [],
    )


def test_first_person_statements_become_facts_citing_their_message() -> None:
    answer = RulesModel().consolidate(
        batch(
            ("alice", "Hi all! I'm a nurse and I love hiking in the Alps."),
            ("bob", "Alice likes sushi, by the way."),
            ("bob", "Do you like jazz?"),
            ("bob", "I use Neovim for everything. I'm allergic to peanuts."),
        )
    )

    got = {(f.user_id, f.text, f.kind.value, tuple(f.evidence)) for f in answer.facts}
    assert got == {
        ("alice", "Is a nurse", "fact", (1,)),
        ("alice", "Likes hiking in the Alps", "preference", (1,)),
        ("bob", "Uses Neovim for everything", "tool", (4,)),
        ("bob", "Is allergic to peanuts", "constraint", (4,)),
    }


def test_a_changed_single_valued_fact_supersedes_the_known_one() -> None:
    known = [KnownFact(fact_id="abc", user_id="alice", kind="fact", text="Lives in Lyon")]

    answer = RulesModel().consolidate(batch(("alice", "I moved to Berlin last week."), facts=known))

    (fact,) = answer.facts
    assert fact.text == "Lives in Berlin last week" or fact.text.startswith("Lives in Berlin")
    assert fact.supersedes == ["abc"]


def test_the_episode_is_extractive_names_the_people_and_is_deterministic() -> None:
    conversation = batch(
        ("alice", "We should plan the garden this spring. Tomatoes first."),
        ("bob", "ok"),
        ("bob", "I can build raised beds from the old fence."),
    )

    first = RulesModel().consolidate(conversation)
    again = RulesModel().consolidate(conversation)

    assert first == again
    assert first.episode.participants == ["alice", "bob"]
    assert "Alice, Bob talked" in first.episode.summary
    assert "We should plan the garden this spring." in first.episode.summary
    assert "raised beds" in first.episode.summary
