"""The vector leg embeds a question without the names in it (embeddings.question_for_vectors):
a name pulls the question's vector toward every passage said by or to that person, and the
keyword leg and recall's said-by rule already carry it. Proven on the embedded index with an
in-process embedder that knows names, and on the deployed hybrid through the project's
`openai:` embedder against an OpenAI-compatible server on 127.0.0.1."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from botmemory.search.deployed import DeployedSearchIndex
from botmemory.search.embeddings import question_for_vectors
from botmemory.search.port import Passage, PassageKind, SearchQuery
from botmemory.search.postgres_index import PostgresKeywordIndex
from botmemory.search.s3vectors_index import S3VectorsSearchIndex
from botmemory.search.sqlite_index import SqliteSearchIndex
from eval.vector_service import InMemoryS3Vectors
from tests.support.fake_embeddings import EmbeddingServer, project_embedder
from tests.support.fake_providers import serving
from tests.support.passages import message_passage

GUILD = "100"
CHANNEL = "200"
NOW_S = 1_767_225_600


@pytest.mark.parametrize(
    ("question", "embedded"),
    [
        # A name inside a sentence goes, with its possessive; what ends the clause stays.
        (
            "What is Melanie's reason for getting into running?",
            "What is reason for getting into running?",
        ),
        ("Would Melanie enjoy a song by Vivaldi?", "Would enjoy a song by?"),
        ("¿Qué instrumento toca Lucía?", "¿Qué instrumento toca?"),
        ("What did <@123456789012345678> bake on Sunday?", "What did bake on?"),
        # A word opening a sentence or a quotation may be any word; capitals are not names.
        ("Melanie, what did you paint?", "Melanie, what did you paint?"),
        ("Which LGBTQ groups did Caroline join?", "Which LGBTQ groups did join?"),
        ('Is "Four Seasons" on the playlist?', 'Is "Four" on the playlist?'),
        # Asking about the person alone: nothing else to embed, so the whole question.
        ("Tell me about Melanie", "Tell me about Melanie"),
        ("What did Caroline say?", "What did Caroline say?"),
        ("Who is Bob?", "Who is Bob?"),
        # German capitalizes its nouns: a capital is not a name there.
        (
            "In welche Stadt ist Annas Schwester umgezogen?",
            "In welche Stadt ist Annas Schwester umgezogen?",
        ),
        # Scripts without capitals, and lower-case nicknames, are embedded as they are.
        ("アンナの妹はどこに引っ越しましたか？", "アンナの妹はどこに引っ越しましたか？"),
        ("what did xx_gamer say about the raid", "what did xx_gamer say about the raid"),
    ],
)
def test_the_vector_leg_embeds_a_question_without_its_names(question: str, embedded: str) -> None:
    assert question_for_vectors(question) == embedded


def said_by(name: str, message_id: str, text: str) -> Passage:
    """A message's passage as consolidation writes it: labelled with its speaker."""
    plain = message_passage(message_id, text, CHANNEL, GUILD)
    return plain.model_copy(update={"text": f"{name}: {text}", "labels": [name]})


class NamesAndTopics:
    """A deterministic fake embedder: a dimension per concept, counting the words that name
    it (speaker labels included, as passages are embedded "Name: text")."""

    name = "fake-names-and-topics"
    CONCEPTS: tuple[frozenset[str], ...] = (
        frozenset({"melanie"}),
        frozenset({"jog", "jogging", "running", "run"}),
    )
    dimensions = len(CONCEPTS)

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        self.calls.append(list(texts))
        return [self._vector(text) for text in texts]

    def _vector(self, text: str) -> list[float]:
        words = [w.strip(".,?!:'").lower() for w in text.replace("'s", "").split()]
        return [float(sum(w in concept for w in words)) for concept in self.CONCEPTS]


def test_a_named_persons_small_talk_does_not_crowd_out_the_answer() -> None:
    """LoCoMo's shape: the question names Melanie, the answer is worded apart from it (no
    keyword in common), and Melanie's greetings are newer. Embedded whole, the question is
    as near her greetings as the answer, and the newer win the one place; without the name,
    the answer is the nearest."""
    embedder = NamesAndTopics()
    index = SqliteSearchIndex(embedder=embedder)
    answer = said_by("Melanie", "1", "Jogging clears my head")
    greetings = [said_by("Melanie", str(n), "Hello again, good to see you") for n in (2, 3, 4)]
    try:
        index.add([answer, *greetings])
        ask = SearchQuery(scope=GUILD, text="Why does Melanie run?", now_s=NOW_S, limit=1)
        hits = index.search(ask)
    finally:
        index.close()

    assert [h.passage.id for h in hits] == [answer.id]
    assert hits[0].keyword_rank is None  # found by meaning alone
    assert embedder.calls[-1] == ["Why does run?"]


@pytest.fixture
def server() -> Iterator[EmbeddingServer]:
    with serving(EmbeddingServer()) as running:
        yield running


def test_the_deployed_hybrid_embeds_the_question_without_its_names(
    pg_index: PostgresKeywordIndex, server: EmbeddingServer
) -> None:
    vectors = S3VectorsSearchIndex(
        "vectors", "passages", project_embedder(server.base_url, 64), client=InMemoryS3Vectors()
    )
    index = DeployedSearchIndex(vectors, pg_index)
    answer = said_by("Melanie", "1", "Jogging clears my head")
    index.add([answer])
    ask = SearchQuery(
        scope=GUILD,
        channel_ids=[CHANNEL, ""],
        kinds=[PassageKind.MESSAGE],
        text="Why does Melanie jog?",
        now_s=NOW_S,
    )

    hits = index.search(ask)

    assert server.calls[-1] == ["Why does jog?"]
    # The keyword leg still looks for every word of the question, the name included.
    assert [h.passage.id for h in hits] == [answer.id]
