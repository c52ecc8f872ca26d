"""What is said in a private channel is never repeated outside it (botmemory.memory.visibility).

Through the functions template.yaml declares: the relay's events into IngestFunction, the
table's stream into ConsolidateFunction (through its template filter) with a memory model on
127.0.0.1 that writes facts (tests.support.fake_memory_model, reached by the project's `openai:`
client), RecallFunction, AnswerFunction with a chat model on 127.0.0.1, and the slash
commands through InteractionsFunction, signed as Discord signs them.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.stub import Stubber

from botmemory.answering.requests import register_local_target
from botmemory.clock import ManualClock, SystemClock
from botmemory.discord.interactions import Permissions
from botmemory.recall.contract import parse_request
from botmemory.records import Fact, Observation, scope_of
from botmemory.runtime import build_services
from botmemory.search.passages import message_passages
from botmemory.search.s3vectors_index import S3VectorsSearchIndex, metadata_of
from botmemory.services import MemoryServices
from botmemory.settings.config import Settings
from botmemory.storage.items import observation_values
from botmemory.storage.keys import observation_sk
from localrun import gateway as gw
from localrun.samtemplate import passes_filters
from localrun.storage import put_items
from scripts.make_events import command, signed
from tests.botmemory.search.test_s3vectors_index import FakeEmbedder
from tests.conftest import START_MS, TABLE
from tests.stack.test_sam_local import stream_records
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest, fake_discord_fixture  # noqa: F401
from tests.support.fake_memory_model import RunningWriter, Teaching, fact_writer  # noqa: F401
from tests.support.fake_providers import Scripted, ScriptServer
from tests.support.lambda_local import LocalLambda, sample_env

GENERAL = gw.CHANNEL  # public
PRIVATE = "200000000000000700"  # @everyone may not view it
LOUNGE = "200000000000000701"  # public
DM = "200000000000000799"  # Carol's direct messages with the bot
DAVE = gw.BOB
VIEW_CHANNEL = int(Permissions.VIEW_CHANNEL)
ANSWER = "AnswerFunction"
TEACHINGS = [
    Teaching("I'm pregnant", "{name} is pregnant"),
    Teaching("weekend is all gardening", "{name} loves gardening", "preference"),
]


def guild_create() -> dict[str, Any]:
    hidden = {"id": gw.GUILD, "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
    return {
        "t": "GUILD_CREATE",
        "d": {
            "id": gw.GUILD,
            "owner_id": "300000000000000999",
            "roles": [{"id": gw.GUILD, "permissions": str(VIEW_CHANNEL)}],
            "channels": [
                {"id": GENERAL, "type": 0},
                {"id": PRIVATE, "type": 0, "permission_overwrites": [hidden]},
                {"id": LOUNGE, "type": 0},
            ],
        },
    }


def made_private(channel: str) -> dict[str, Any]:
    hidden = {"id": gw.GUILD, "type": 0, "allow": "0", "deny": str(VIEW_CHANNEL)}
    return {
        "t": "CHANNEL_UPDATE",
        "d": {"id": channel, "type": 0, "guild_id": gw.GUILD, "permission_overwrites": [hidden]},
    }


def chat_reply(text: str, tool_calls: list[tuple[str, dict[str, Any]]] = ()) -> Scripted:  # type: ignore[assignment]
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": f"call-{n}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for n, (name, arguments) in enumerate(tool_calls)
        ]
    return Scripted(200, {"choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})


class Server:
    """A deployment of the template's functions on the test's in-process AWS."""

    def __init__(
        self,
        monkeypatch: pytest.MonkeyPatch,
        discord: FakeDiscordRest,
        dynamodb: Any,
        chat: ScriptServer,
        writer: RunningWriter,
        index_path: Path,
    ) -> None:
        env = sample_env()
        for function, variables in env.items():
            if function != "Parameters":
                variables["MEMORY_SEARCH_INDEX"] = f"sqlite:{index_path}"
                variables["MEMORY_SEARCH_SCOPE"] = "guild"  # search spans the server
                variables["DISCORD_BOT_USER_ID"] = gw.BOT
        env["ConsolidateFunction"].update(writer.environment(), MEMORY_CONSOLIDATE_EVERY="2")
        env[ANSWER].update(
            DISCORD_API_BASE=discord.url,
            DISCORD_BOT_TOKEN=BOT_TOKEN,
            CHAT_MODEL="openai:gpt-test",
            CHAT_MODEL_BASE_URL=chat.base_url,
            CHAT_MODEL_API_KEY="sk-test-chat",
            CHAT_MODEL_API_KEY_SECRET="",
        )
        env["InteractionsFunction"].update(DISCORD_API_BASE=discord.url)
        self.local = LocalLambda(monkeypatch, env)
        self.discord = discord
        self.dynamodb = dynamodb
        self.chat = chat
        self.seen: set[str] = set()
        self.answers: list[dict[str, Any]] = []
        self.reports: list[dict[str, Any]] = []
        register_local_target(ANSWER, self.answers.append)
        self.at = int(time.time() * 1000) - 60_000
        self._ids = iter(range(1, 10_000))

    def say(self, *events: dict[str, Any]) -> None:
        """Ingest, deliver the stream to ConsolidateFunction, then run the answers started."""
        self.local.invoke("IngestFunction", {"events": list(events)})
        stream_arn = self.dynamodb.describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        records = stream_records(self.dynamodb, stream_arn, self.seen)
        self.seen |= {r["dynamodb"]["SequenceNumber"] for r in records}
        filters = self.local.template.stream_filters("ConsolidateFunction")
        delivered = [r for r in records if passes_filters(filters, r)]
        if delivered:
            failures = self.local.invoke("ConsolidateFunction", {"Records": delivered})
            assert failures == {"batchItemFailures": []}
        while self.answers:
            self.reports.append(self.local.invoke(ANSWER, self.answers.pop(0)))

    def message(self, author: str, text: str, channel: str, **kwargs: Any) -> dict[str, Any]:
        self.at += 1000
        guild = None if channel == DM else gw.GUILD
        return gw.message(author, text, self.at, channel=channel, guild=guild, **kwargs)

    def mention(self, author: str, text: str, channel: str) -> dict[str, Any]:
        event = self.message(author, f"<@{gw.BOT}> {text}", channel)
        event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]
        return event

    def recall(self, channel: str, user: str, **fields: Any) -> dict[str, Any]:
        request = {"channel_id": channel, "user_id": user, **fields}
        if channel != DM:
            request["guild_id"] = gw.GUILD
        answer: dict[str, Any] = self.local.invoke("RecallFunction", request)
        return answer

    def memory_show(self, user: str, channel: str) -> str:
        interaction = command(str(next(self._ids)), "memory", "show", None, "0", user)
        interaction.update(guild_id=gw.GUILD, channel_id=channel, token=f"t{next(self._ids)}")
        interaction["member"]["user"] = gw.user(user)
        response = self.local.invoke("InteractionsFunction", signed(interaction, "r"))
        return str(json.loads(response["body"])["data"]["content"])

    def facts(self, user: str) -> dict[str, Fact]:
        services: MemoryServices = build_services(
            Settings(table_name=TABLE, memory_model="rules"),
            dynamodb=self.dynamodb,
            clock=SystemClock(),
        )
        return {f.text: f for f in services.repository.all_facts(scope_of(gw.GUILD), user)}

    def posted(self, channel: str) -> list[str]:
        return [
            str(r.body.get("content", ""))
            for r in self.discord.requests_matching("POST", f"/channels/{channel}/messages")
        ]


@pytest.fixture
def server(
    monkeypatch: pytest.MonkeyPatch,
    fake_discord: FakeDiscordRest,
    dynamodb: Any,
    chat_server: ScriptServer,
    fact_writer: RunningWriter,  # noqa: F811
    tmp_path: Path,
) -> Server:
    fact_writer.writer.teachings.extend(TEACHINGS)
    # A round's short-term line for each speaker (botmemory.memory.short_term).
    fact_writer.writer.recent_line = "talked about gardening plans"
    deployed = Server(
        monkeypatch, fake_discord, dynamodb, chat_server, fact_writer, tmp_path / "index.db"
    )
    deployed.say(guild_create())
    return deployed


def carol_speaks(server: Server) -> None:
    server.say(
        server.message(gw.CAROL, "I'm pregnant, please keep it quiet", PRIVATE),
        server.message(DAVE, "Of course, congratulations!", PRIVATE),
    )
    server.say(
        server.message(gw.CAROL, "My weekend is all gardening", GENERAL),
        server.message(DAVE, "nice", GENERAL),
    )


def test_facts_keep_where_they_were_learned(server: Server) -> None:
    carol_speaks(server)

    facts = server.facts(gw.CAROL)

    assert facts["Carol is pregnant"].learned_in == [PRIVATE]
    assert facts["Carol is pregnant"].learned_in_public == []
    assert facts["Carol loves gardening"].learned_in == [GENERAL]
    assert facts["Carol loves gardening"].learned_in_public == [GENERAL]


def test_a_private_channel_fact_never_reaches_a_public_channel_s_recall(server: Server) -> None:
    carol_speaks(server)

    as_participant = server.recall(GENERAL, DAVE, participants=[gw.CAROL])
    named = server.recall(GENERAL, DAVE, participants=[], query="is Carol pregnant?")
    derived = server.recall(LOUNGE, gw.CAROL)

    assert "gardening" in as_participant["memory"]
    for block in (as_participant, named, derived):
        assert "pregnant" not in block["memory"].lower(), block["memory"]
        assert "pregnant" not in json.dumps(block).lower()
    # The search index holds the private message, the fact, and the channel's words: search
    # spans the server (MEMORY_SEARCH_SCOPE=guild) and still finds nothing of them here.
    assert named["search"] == "ok"


def test_it_is_shown_in_its_own_channel_and_to_the_person_in_their_dm(server: Server) -> None:
    carol_speaks(server)

    here = server.recall(PRIVATE, DAVE, participants=[gw.CAROL], query="is Carol pregnant?")
    dm = server.recall(DM, gw.CAROL)

    assert "Carol is pregnant" in here["memory"]
    assert "Carol is pregnant" in dm["memory"] and "Carol loves gardening" in dm["memory"]
    # Someone else's direct messages never hold Carol's facts.
    assert "Carol" not in server.recall(DM, DAVE)["memory"]


def test_the_answer_prompt_speaker_note_and_notices_keep_it(server: Server) -> None:
    carol_speaks(server)
    pregnant = server.facts(gw.CAROL)["Carol is pregnant"]
    server.chat.script.append(chat_reply("I can't say."))
    server.say(server.mention(DAVE, "is Carol pregnant?", GENERAL))
    # Carol, in public: her note shows her public facts only, so the private one can't be
    # corrected there, and no notice quotes it.
    server.chat.script.append(
        chat_reply(
            "Done.",
            [("update_memory", {"id": pregnant.fact_id, "text": "Carol is not pregnant"})],
        )
    )
    server.chat.script.append(chat_reply("I could not change that."))  # told it was refused
    server.say(server.mention(gw.CAROL, "what do you know about me?", GENERAL))

    dave_asks, carol_asks, told = (r.body["messages"][0]["content"] for r in server.chat.requests)
    assert told == carol_asks  # the answer after the refusal: the same prompt
    for prompt in (dave_asks, carol_asks):
        # Dave's public question is in the channel's history; nothing Carol said privately.
        assert "Carol is pregnant" not in prompt and "keep it quiet" not in prompt
    assert pregnant.fact_id not in carol_asks
    assert "gardening" in carol_asks
    assert not any("Carol is pregnant" in text for text in server.posted(GENERAL))
    assert server.facts(gw.CAROL)["Carol is pregnant"].text == "Carol is pregnant"


def test_in_its_own_channel_the_person_may_correct_it_in_the_open(server: Server) -> None:
    carol_speaks(server)
    pregnant = server.facts(gw.CAROL)["Carol is pregnant"]
    server.chat.script.append(
        chat_reply(
            "Updated.",
            [("update_memory", {"id": pregnant.fact_id, "text": "Carol is expecting twins"})],
        )
    )
    server.chat.script.append(chat_reply("Congratulations!"))  # told it was applied

    server.say(server.mention(gw.CAROL, "I'm expecting twins actually", PRIVATE))

    prompt, told = (r.body["messages"][0]["content"] for r in server.chat.requests)
    assert told == prompt
    assert pregnant.fact_id in prompt
    assert any("twins" in text for text in server.posted(PRIVATE))
    corrected = server.facts(gw.CAROL)["Carol is expecting twins"]
    # Its new words were said here: shown here only, like the old ones.
    assert corrected.learned_in == [PRIVATE] and corrected.learned_in_public == []


def test_a_channel_made_private_stops_crossing_and_a_deleted_one_at_once(
    server: Server,
) -> None:
    server.say(
        server.message(gw.CAROL, "My weekend is all gardening", GENERAL),
        server.message(DAVE, "nice", GENERAL),
    )
    before = server.recall(LOUNGE, DAVE, participants=[gw.CAROL])
    assert "gardening" in before["memory"]
    assert {e["channel_id"] for e in before["elsewhere"]} == {GENERAL}

    server.say(made_private(GENERAL))

    after = server.recall(LOUNGE, DAVE, participants=[gw.CAROL])
    assert "gardening" not in json.dumps(after).lower()
    assert after["elsewhere"] == []
    assert "gardening" in server.recall(GENERAL, DAVE, participants=[gw.CAROL])["memory"]

    server.say(
        server.message(gw.CAROL, "My weekend is all gardening, and tomatoes", LOUNGE),
        server.message(DAVE, "cool", LOUNGE),
    )
    assert "gardening" in server.recall(PRIVATE, DAVE, participants=[gw.CAROL])["memory"]
    server.say({"t": "CHANNEL_DELETE", "d": {"id": LOUNGE, "type": 0, "guild_id": gw.GUILD}})
    assert "gardening" not in server.recall(PRIVATE, DAVE, participants=[gw.CAROL])["memory"]


def test_memory_show_says_where_each_fact_was_learned(server: Server) -> None:
    carol_speaks(server)

    shown = server.memory_show(gw.CAROL, GENERAL)

    assert "Carol is pregnant (fact, self" in shown
    assert f"learned in <#{PRIVATE}> (private)" in shown
    assert f"learned in <#{GENERAL}>)" in shown


def test_recall_names_people_by_their_stored_names(server: Server) -> None:
    carol_speaks(server)

    block = server.recall(GENERAL, DAVE, participants=[gw.CAROL])

    assert '"Carol" (user' in block["memory"]
    assert '"someone"' not in block["memory"]


def test_on_the_index_the_template_deploys_a_private_channel_s_words_stay_in_it(
    dynamodb: Any, clock: ManualClock
) -> None:
    """The same rule with S3 Vectors (QueryVectors played by botocore's Stubber, as moto
    lacks it): the index, searched server-wide, returns both channels' passages; recall in
    a third public channel shows the public one only."""
    client = boto3.client(
        "s3vectors",
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    index = S3VectorsSearchIndex("memory-bucket", "passages", FakeEmbedder(), client=client)
    settings = Settings(table_name=TABLE, memory_model="rules", search_scope="guild")
    services = build_services(settings, dynamodb=dynamodb, clock=clock, search_index=index)
    services.repository.put_channel_visibility(gw.GUILD, GENERAL, True)
    services.repository.put_channel_visibility(gw.GUILD, LOUNGE, True)
    said = {
        PRIVATE: "The vault code is tangerine-42, keep it between us",
        GENERAL: "The lunch code is tangerine-7 for everyone",
    }
    passages = []
    for n, (channel, words) in enumerate(said.items()):
        at = START_MS + n * 1000
        message = Observation(
            channel_id=channel,
            scope=gw.GUILD,
            sk=observation_sk(at, "msg", str(5000 + n)),
            kind="msg",
            at_ms=at,
            author_id=gw.CAROL,
            author_name="Carol",
            message_id=str(5000 + n),
            content=words,
        )
        (passage,) = message_passages([message], gw.GUILD, gw.BOT)
        stored_message = message.model_copy(update={"passages": [passage.id]})
        put_items(services.repository, [observation_values(stored_message, pending=False)])
        passages.append(passage)
    request = {
        "guild_id": gw.GUILD,
        "channel_id": LOUNGE,
        "user_id": DAVE,
        "participants": [],
        "query": "what is the code tangerine",
    }

    with Stubber(client) as stub:
        vectors = [{"key": p.id, "metadata": metadata_of(p), "distance": 0.1} for p in passages]
        stub.add_response("query_vectors", {"vectors": vectors, "distanceMetric": "cosine"})
        block = services.recaller.recall(parse_request(request))

    assert block.search == "ok"
    assert "tangerine-7" in block.memory
    assert "tangerine-42" not in block.memory and "vault" not in block.memory
