"""Table 8: dollars per million observed messages, all-in, and the answer path per 1,000
mentions, at the prices of bench/prices.toml; beside mem0 and Graphiti on the same messages.

The counts are measured (`measure`): a channel's messages through ingest and consolidation,
one trigger each, then mentions answered in it. What the bench cannot measure (model
latency, output tokens, batching) is an assumption of prices.toml, named as such. The
arithmetic (`cost_rows`, `others_rows`) is pure, so tests/bench checks it on known input.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keyword_db_cost import print_keyword_db_costs
from meter import Request, item_size, item_writes, read_units
from tables import GB, MILLION, print_table

ROOT = Path(__file__).resolve().parents[1]
PRICES = Path(__file__).with_name("prices.toml")
VECTOR_DIMENSIONS = 512  # EmbeddingDimensions' default
FUNCTIONS = ("IngestFunction", "ConsolidateFunction", "SearchIndexFunction", "SweepFunction")


@dataclass(frozen=True)
class Prices:
    date: str
    prices: dict[str, float]
    assumptions: dict[str, float]
    others: dict[str, dict[str, float]]


def load_prices(path: Path = PRICES) -> Prices:
    with path.open("rb") as handle:
        data = tomllib.load(handle)
    return Prices(str(data["date"]), data["prices"], data["assumptions"], data["others"])


@dataclass(frozen=True)
class Deployment:
    """What the templates fix: each function's memory, the relay's task size."""

    memory_mb: dict[str, int]
    relay_vcpu: float
    relay_gb: float


def deployment() -> Deployment:
    """Memory sizes from template.yaml (a function's own, else Globals'); the relay's task
    from relay/template.yaml's defaults (Cpu in vCPU units of 1024, Memory in MiB)."""
    from localrun.samtemplate import load_template

    main = load_template(ROOT / "template.yaml")
    default = int(main["Globals"]["Function"].get("MemorySize", 128))
    memory = {
        name: int(resource["Properties"].get("MemorySize", default))
        for name, resource in main["Resources"].items()
        if resource["Type"] == "AWS::Serverless::Function"
    }
    relay = load_template(ROOT / "relay" / "template.yaml")["Parameters"]
    return Deployment(
        memory, int(relay["Cpu"]["Default"]) / 1024, int(relay["Memory"]["Default"]) / 1024
    )


@dataclass
class Usage:
    """What `messages` observed messages and `answers` answered mentions cost in requests,
    bytes and tokens, as measured."""

    messages: int
    triggers_waiting: int = 0  # consolidation triggers below the threshold
    rounds: float = 0  # consolidations: one memory model call each (a rate when priced at 9c's)
    fleet_rate: float | None = None  # model calls per 1,000 messages, from table 9c
    ingest_requests: int = 0  # DynamoDB requests of ingest, all messages
    waiting_requests: int = 0  # of the triggers below the threshold, all of them
    round_requests: int = 0  # of the rounds, all of them
    write_units: float = 0.0
    read_units: float = 0.0
    stream_records: int = 0
    stored_bytes: int = 0  # the table after the run, 100 bytes of overhead per item included
    model_input_tokens: int = 0
    passages: int = 0
    passage_tokens: int = 0
    vector_bytes: int = 0  # PutVectors: vector, key and metadata of every passage
    message_tokens: int = 0  # the messages themselves, for the comparison
    answers: int = 0
    answer_requests: int = 0
    answer_write_units: float = 0.0
    answer_read_units: float = 0.0
    chat_input_tokens: int = 0
    query_tokens: int = 0


@dataclass(frozen=True)
class Row:
    item: str
    quantity: str
    dollars: float
    note: str = ""


@dataclass
class Costs:
    per_million: list[Row] = field(default_factory=list)
    per_thousand_mentions: list[Row] = field(default_factory=list)

    @staticmethod
    def total(rows: Sequence[Row]) -> float:
        return sum(r.dollars for r in rows)


def _lambda(
    name: str, invokes: float, ms_each: float, memory_mb: int, prices: dict[str, float], note: str
) -> Row:
    gb_seconds = invokes * ms_each / 1000 * memory_mb / 1024
    dollars = (
        invokes / MILLION * prices["lambda_requests_per_million"]
        + gb_seconds * prices["lambda_arm_gb_second"]
    )
    return Row(f"Lambda {name}", f"{invokes:,.0f} invokes, {gb_seconds:,.0f} GB-s", dollars, note)


def vector_gb(usage: Usage) -> float:
    """What a million messages upload to S3 Vectors (and it then holds), GB."""
    return MILLION / usage.messages * usage.vector_bytes / GB


def cost_rows(usage: Usage, setup: Deployment, table: Prices) -> Costs:
    """Every cost line per million messages, and the answer path per 1,000 mentions (the
    keyword database's are table 8d's: bench/keyword_postgres.py)."""
    p, a = table.prices, table.assumptions
    scale = MILLION / usage.messages
    spread = MILLION / a["messages_per_month"]  # a month's fixed costs, per million messages
    per_invoke = a["events_per_invoke"]
    rq = a["request_ms"]
    months = a["retention_months"]
    costs = Costs()
    rows = costs.per_million

    ingest_ms = rq * usage.ingest_requests / usage.messages * per_invoke
    rows.append(
        _lambda(
            "IngestFunction",
            scale * usage.messages / per_invoke,
            ingest_ms,
            setup.memory_mb["IngestFunction"],
            p,
            f"{ingest_ms:.0f} ms: its requests x {rq:.0f} ms",
        )
    )
    triggers = usage.triggers_waiting + usage.rounds
    consolidate_ms = (
        rq * (usage.waiting_requests + usage.round_requests)
        + usage.rounds * (a["memory_model_ms"] + a["embedding_ms"])
    ) / triggers
    rows.append(
        _lambda(
            "ConsolidateFunction",
            scale * triggers / per_invoke,
            consolidate_ms * per_invoke,
            setup.memory_mb["ConsolidateFunction"],
            p,
            f"mean {consolidate_ms:.0f} ms: requests, and per round the model"
            f" ({a['memory_model_ms']:.0f} ms) and embeddings ({a['embedding_ms']:.0f} ms)",
        )
    )
    rows.append(
        _lambda(
            "SearchIndexFunction",
            scale * usage.rounds,
            rq * 2,
            setup.memory_mb["SearchIndexFunction"],
            p,
            "one stream batch per round, 2 round trips",
        )
    )
    rows.append(
        _lambda(
            "SweepFunction",
            spread * a["sweeps_per_month"],
            rq * 2,
            setup.memory_mb["SweepFunction"],
            p,
            "every 5 minutes, whatever the traffic",
        )
    )
    wru, rru = scale * usage.write_units, scale * usage.read_units
    rows.append(
        Row(
            "DynamoDB writes",
            f"{wru:,.0f} WRU",
            wru / MILLION * p["dynamodb_write_units_per_million"],
        )
    )
    rows.append(
        Row(
            "DynamoDB reads",
            f"{rru:,.0f} RRU",
            rru / MILLION * p["dynamodb_read_units_per_million"],
        )
    )
    records = scale * usage.stream_records
    rows.append(
        Row(
            "DynamoDB stream reads",
            f"{records:,.0f} records",
            records / MILLION * p["dynamodb_stream_reads_per_million"],
            "free for Lambda triggers",
        )
    )
    stored_gb = scale * usage.stored_bytes / GB
    rows.append(
        Row(
            "DynamoDB storage",
            f"{stored_gb:,.2f} GB x {months:.0f} months",
            stored_gb * months * p["dynamodb_storage_gb_month"],
            "kept ObservationRetentionDays",
        )
    )
    put_gb = vector_gb(usage)
    rows.append(
        Row("S3 Vectors PutVectors", f"{put_gb:,.2f} GB", put_gb * p["s3vectors_put_per_gb"])
    )
    rows.append(
        Row(
            "S3 Vectors storage",
            f"{put_gb:,.2f} GB x {months:.0f} months",
            put_gb * months * p["s3vectors_storage_gb_month"],
        )
    )
    embedded = scale * usage.passage_tokens
    rows.append(
        Row(
            "embeddings",
            f"{embedded:,.0f} tokens",
            embedded / MILLION * p["embedding_tokens_per_million"],
            f"{scale * usage.passages:,.0f} passages",
        )
    )
    model_in = scale * usage.model_input_tokens
    model_out = scale * usage.rounds * a["memory_model_output_tokens"]
    rows.append(
        Row(
            "memory model input",
            f"{model_in:,.0f} tokens",
            model_in / MILLION * p["memory_model_input_per_million"],
            f"{scale * usage.rounds:,.0f} rounds, one call each",
        )
    )
    rows.append(
        Row(
            "memory model output",
            f"{model_out:,.0f} tokens",
            model_out / MILLION * p["memory_model_output_per_million"],
            f"{a['memory_model_output_tokens']:.0f} a round (assumed)",
        )
    )
    hours = a["hours_per_month"]
    relay = hours * (
        setup.relay_vcpu * p["fargate_arm_vcpu_hour"]
        + setup.relay_gb * p["fargate_arm_gb_hour"]
        + p["public_ipv4_hour"]
    )
    rows.append(
        Row(
            "relay on Fargate",
            f"{setup.relay_vcpu:g} vCPU, {setup.relay_gb:g} GB, IPv4, {hours:.0f} h",
            relay * spread,
            "a month, spread over its messages",
        )
    )
    rows.append(
        Row(
            "Secrets Manager",
            f"{a['secrets']:.0f} secrets",
            a["secrets"] * p["secret_month"] * spread,
            "a month, spread over its messages",
        )
    )

    if usage.answers:
        costs.per_thousand_mentions = _answer_rows(usage, setup, table, put_gb)
    return costs


def _answer_rows(usage: Usage, setup: Deployment, table: Prices, index_gb: float) -> list[Row]:
    """1,000 mentions answered, in a deployment whose index holds a million messages."""
    p, a = table.prices, table.assumptions
    scale = 1000 / usage.answers
    rq = a["request_ms"]
    answer_ms = rq * usage.answer_requests / usage.answers + a["embedding_ms"] + a["chat_model_ms"]
    chat_in = scale * usage.chat_input_tokens
    chat_out = 1000 * a["chat_output_tokens"]
    wru, rru = scale * usage.answer_write_units, scale * usage.answer_read_units
    processed_tb = 1000 * index_gb / 1024
    return [
        _lambda(
            "AnswerFunction",
            1000,
            answer_ms,
            setup.memory_mb["AnswerFunction"],
            p,
            f"{answer_ms:.0f} ms: requests, embedding, the chat model ({a['chat_model_ms']:.0f} ms)",
        ),
        Row(
            "DynamoDB writes",
            f"{wru:,.0f} WRU",
            wru / MILLION * p["dynamodb_write_units_per_million"],
        ),
        Row(
            "DynamoDB reads",
            f"{rru:,.0f} RRU",
            rru / MILLION * p["dynamodb_read_units_per_million"],
        ),
        Row(
            "S3 Vectors QueryVectors",
            f"1,000 queries, {processed_tb:,.2f} TB processed",
            1000 / MILLION * p["s3vectors_queries_per_million"]
            + processed_tb * p["s3vectors_processed_per_tb"],
            "each query scans an index of a million messages' passages",
        ),
        Row(
            "query embeddings",
            f"{scale * usage.query_tokens:,.0f} tokens",
            scale * usage.query_tokens / MILLION * p["embedding_tokens_per_million"],
        ),
        Row(
            "chat model input",
            f"{chat_in:,.0f} tokens",
            chat_in / MILLION * p["chat_model_input_per_million"],
        ),
        Row(
            "chat model output",
            f"{chat_out:,.0f} tokens",
            chat_out / MILLION * p["chat_model_output_per_million"],
            f"{a['chat_output_tokens']:.0f} an answer (assumed)",
        ),
    ]


def others_rows(usage: Usage, table: Prices) -> list[tuple[str, float, float, float]]:
    """Model calls, model dollars and embedding dollars per million messages: this layer's
    memory model, then each other layer's calls on the same messages at the same prices."""
    p = table.prices
    scale = MILLION / usage.messages
    message_tokens = usage.message_tokens / usage.messages
    ours_model = (
        scale * usage.model_input_tokens / MILLION * p["memory_model_input_per_million"]
        + scale
        * usage.rounds
        * table.assumptions["memory_model_output_tokens"]
        / MILLION
        * p["memory_model_output_per_million"]
    )
    ours_embed = scale * usage.passage_tokens / MILLION * p["embedding_tokens_per_million"]
    found = [("this layer", scale * usage.rounds, ours_model, ours_embed)]
    for name, other in table.others.items():
        calls = MILLION * other["calls_per_message"]
        tokens_in = calls * (message_tokens + other["context_tokens"])
        tokens_out = calls * other["output_tokens"]
        model = (
            tokens_in / MILLION * p["memory_model_input_per_million"]
            + tokens_out / MILLION * p["memory_model_output_per_million"]
        )
        embedded = MILLION * other["embeddings_per_message"] * message_tokens
        found.append((name, calls, model, embedded / MILLION * p["embedding_tokens_per_million"]))
    return found


# Measuring -----------------------------------------------------------------------------


def write_units(request: Request) -> float:
    """Estimated write units of one write: 1 KB units of each item; twice in a transaction."""

    def units(item: dict[str, Any] | None) -> int:
        return max(1, math.ceil(item_size(item or {}) / 1024))

    body = request.body
    if request.operation == "PutItem":
        return units(body.get("Item"))
    if request.operation in ("UpdateItem", "DeleteItem"):
        return 1.0
    if request.operation == "BatchWriteItem":
        return float(
            sum(
                units(entry.get("PutRequest", {}).get("Item"))
                for entries in body.get("RequestItems", {}).values()
                for entry in entries
            )
        )
    if request.operation == "TransactWriteItems":
        return 2.0 * sum(
            units(next(iter(entry.values())).get("Item")) for entry in body.get("TransactItems", [])
        )
    return 0.0


def writes_of(requests: Sequence[Request]) -> float:
    return sum(write_units(r) for r in requests)


def reads_of(requests: Sequence[Request]) -> float:
    transactional = sum(2.0 for r in requests if r.operation == "TransactGetItems")
    return sum(read_units(r) for r in requests) + transactional


def tokens(chars: int, table: Prices) -> int:
    return math.ceil(chars / table.assumptions["chars_per_token"])


@contextmanager
def passages_kept(kept: list[Any]) -> Iterator[None]:
    """Keeps every passage the index writer writes (what PutVectors would upload)."""
    from botmemory.search.index_sync import IndexWriter

    original = IndexWriter.write

    def write(
        writer: IndexWriter, passages: list[Any], remove: Sequence[str] = (), scope: Any = None
    ) -> Any:
        kept.extend(passages)
        return original(writer, passages, remove, scope)

    IndexWriter.write = write  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        IndexWriter.write = original  # type: ignore[method-assign]


def stored_bytes(lab: Any, table_name: str) -> tuple[int, int]:
    """The table's bytes (100 of overhead per item, as DynamoDB bills) and its item count."""
    size, count, start = 0, 0, None
    while True:
        page = lab.client.scan(
            TableName=table_name, **({"ExclusiveStartKey": start} if start else {})
        )
        for item in page["Items"]:
            size += item_size(item) + 100
            count += 1
        start = page.get("LastEvaluatedKey")
        if not start:
            return size, count


def print_costs(usage: Usage, setup: Deployment, table: Prices) -> None:
    costs = cost_rows(usage, setup, table)
    rows: list[tuple[object, ...]] = [
        (r.item, r.quantity, f"{r.dollars:,.4f}", r.note) for r in costs.per_million
    ]
    rows.append(("total per million messages", "", f"{Costs.total(costs.per_million):,.2f}", ""))
    a = table.assumptions
    print_table(
        f"8a. Dollars per million observed messages, all-in (prices of {table.date}, us-east-1)",
        ["item", "quantity", "dollars", "how"],
        rows,
        [
            f"Measured: {usage.messages} messages, one consolidation trigger each; requests,",
            "units, bytes and tokens are the bench's counts, scaled to a million. Memory sizes:",
            "template.yaml; the relay's task: relay/template.yaml's defaults.",
            *(
                [
                    f"Model calls at table 9c's fleet rate: {usage.fleet_rate:.1f} per 1,000 messages."
                ]
                if usage.fleet_rate is not None
                else []
            ),
            f"Assumed (bench/prices.toml): {a['events_per_invoke']:.0f} event per invoke,"
            f" {a['messages_per_month']:,.0f} messages a month, model latencies and output",
            "tokens as shown; CloudWatch logs, metrics and alarms, and data transfer are not in.",
            "The keyword database (KeywordIndex=postgres): table 8d, at three loads.",
            "Prices: bench/prices.toml, one table with its sources; edit it and run again.",
        ],
    )
    answer = costs.per_thousand_mentions
    rows = [(r.item, r.quantity, f"{r.dollars:,.4f}", r.note) for r in answer]
    rows.append(("total per 1,000 mentions", "", f"{Costs.total(answer):,.2f}", ""))
    print_table(
        "8b. The answer path, per 1,000 mentions answered",
        ["item", "quantity", "dollars", "how"],
        rows,
        [
            f"Measured: {usage.answers} mentions answered in the channel above (recall, history,",
            "the rate limit, the reply's observation); the reply's ingest is in 8a.",
        ],
    )
    print_table(
        "8c. Memory-model dollars per million messages, beside mem0 and Graphiti",
        ["layer", "model calls", "model dollars", "embedding dollars"],
        [(n, f"{c:,.0f}", f"{m:,.2f}", f"{e:,.2f}") for n, c, m, e in others_rows(usage, table)],
        [
            "The same messages and the same model prices (MemoryModel, EmbeddingModel).",
            "mem0: 2 calls per add; Graphiti: at least 5 per message; their prompt and",
            "context sizes are bench/prices.toml's assumptions, their storage is left out.",
        ],
    )


def measure(lab: Any, messages: int = 100, answers: int = 3) -> Usage:
    """`messages` chat lines through ingest and consolidation, then `answers` mentions."""
    from world import SilentPoster, TimedChatModel, chat

    from botmemory.answering.answerer import Answerer
    from botmemory.answering.prompt import system_prompt_source
    from botmemory.answering.rate import AnswerRateLimiter
    from botmemory.answering.requests import question_of
    from botmemory.answering.triggers import answer_trigger
    from botmemory.consolidation.model.contract import ANSWER_SCHEMA, INSTRUCTIONS
    from botmemory.consolidation.outcome import Status
    from botmemory.search.s3vectors_index import metadata_of
    from localrun import gateway as gw

    table = load_prices()
    world = lab.world()
    services = world.services
    usage = Usage(messages=messages)
    kept: list[Any] = []
    prompt_chars = len(INSTRUCTIONS) + len(json.dumps(ANSWER_SCHEMA))
    all_requests: list[Request] = []
    events = chat(messages, world.clock.now_ms())
    with passages_kept(kept):
        for event in events:
            services.recorder.record([event])
            ingest = lab.meter.take()
            world.clock.advance(seconds=1)
            outcomes = services.consolidator.consolidate(gw.CHANNEL)
            trigger = lab.meter.take()
            done = [o for o in outcomes if o.status == Status.CONSOLIDATED]
            usage.ingest_requests += len(ingest)
            if done:
                usage.rounds += sum(o.model_calls for o in done)
                usage.round_requests += len(trigger)
                usage.model_input_tokens += sum(
                    tokens(prompt_chars + o.model_input_chars, table) for o in done
                )
            else:
                usage.triggers_waiting += 1
                usage.waiting_requests += len(trigger)
            all_requests += ingest + trigger
            usage.message_tokens += tokens(len(event["d"]["content"]), table)
    usage.write_units = writes_of(all_requests)
    usage.read_units = reads_of(all_requests)
    usage.stream_records = item_writes(all_requests)  # one stream record per item written
    usage.passages = len(kept)
    usage.passage_tokens = sum(tokens(len(p.text), table) for p in kept)
    usage.vector_bytes = sum(
        VECTOR_DIMENSIONS * 4 + len(p.id) + len(json.dumps(metadata_of(p)).encode()) for p in kept
    )
    usage.stored_bytes, _ = stored_bytes(lab, services.settings.table_name)
    lab.meter.take()

    model = TimedChatModel()
    answerer = Answerer(
        services,
        model,
        SilentPoster(),
        AnswerRateLimiter(services.repository, services.settings, world.clock),
        system_prompt_source(services.settings),
    )
    for n in range(answers):
        world.clock.advance(seconds=120)  # under the rate limits
        event = gw.message(gw.ALICE, f"<@{gw.BOT}> what did we say? ({n})", world.clock.now_ms())
        event["d"]["mentions"] = [gw.user(gw.BOT, bot=True)]
        trigger = answer_trigger(event, gw.BOT)
        assert trigger is not None
        question, reply = question_of({"answer": trigger.model_dump(mode="json")})
        answerer.answer(question, reply)
        requests = lab.meter.take()
        request = model.request
        assert request is not None
        usage.answers += 1
        usage.answer_requests += len(requests)
        usage.answer_write_units += writes_of(requests)
        usage.answer_read_units += reads_of(requests)
        chars = len(request.system) + sum(len(t.content) for t in request.turns)
        usage.chat_input_tokens += tokens(chars, table)
        usage.query_tokens += tokens(len(event["d"]["content"]), table)
    return usage


def bench_cost(lab: Any, fleet_calls_per_thousand: float | None = None) -> None:
    """Table 8. With `fleet_calls_per_thousand` (table 9c: a server's quiet, tiny, busy and hot
    channels together), the model calls are priced at that rate instead of the one busy
    channel's that `measure` runs."""
    usage = measure(lab)
    if fleet_calls_per_thousand is not None:
        usage.rounds = fleet_calls_per_thousand * usage.messages / 1000
        usage.fleet_rate = fleet_calls_per_thousand
    prices = load_prices()
    print_costs(usage, deployment(), prices)
    print_keyword_db_costs(prices.prices, prices.date)
