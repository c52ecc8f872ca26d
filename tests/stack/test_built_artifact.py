"""What `make build` built is what is tested: every function's handler from .aws-sam/build,
on Python 3.13, with the layer as built for this machine's architecture, goes through one
round of the demo's flow on moto; and the arm64 layer that deploys is checked itself.

The round: IngestFunction stores a conversation and a mention of the bot (its answer request
goes to a stand-in for Lambda's Invoke), the table's stream reaches ConsolidateFunction
through the template's filter, the work queue (SQS FIFO, moto's) ConsolidateWorkerFunction,
which consolidates with the offline `rules` model and indexes the round in S3 Vectors and
the keyword leg through the RDS Data API (moto's, which answers every statement with no rows)
(embeddings from a stand-in on 127.0.0.1); the stream's removals
reach SearchIndexFunction, the schedule SweepFunction; RecallFunction finds the facts and a
passage, InteractionsFunction answers a signed /memory show, and AnswerFunction answers the
mention through a stand-in for Discord. Secrets come from moto's Secrets Manager.

Each function runs in its own `python3.13 -I -S` process (tests/support/lambda_host.py):
only the standard library beside the function's folder and the layer, so a module the
prune removed but a handler needs fails the round, and no file of the project's virtualenv
or its editable install can stand in for the built copy (every module the run imported is
checked to come from the two folders or the standard library). moto runs as a server in
this process's virtualenv.

`make test` builds first; run alone, `make build` then pytest. A build older than the
sources fails here rather than testing something else.
"""

from __future__ import annotations

import base64
import copy
import datetime
import filecmp
import json
import platform
import re
import struct
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
from packaging.utils import canonicalize_name

from localrun import gateway as gw
from localrun.motoserver import MotoServer
from localrun.samtemplate import Template, passes_filters
from localrun.stack import TEST_PUBLIC_KEY, table_arguments
from tests.stack.test_supply_chain import DEPLOYED, LAYER, versions
from tests.support.fake_discord import BOT_TOKEN, FakeDiscordRest
from tests.support.fake_embeddings import EmbeddingServer
from tests.support.layer import layer_build

ROOT = Path(__file__).resolve().parents[2]
BUILD = ROOT / ".aws-sam" / "build"
ARM64_LAYER = BUILD / "CoreLayer" / "python"
X86_64_LAYER = ROOT / ".aws-sam" / "layer-x86_64" / "python"
HOST = ROOT / "tests" / "support" / "lambda_host.py"
EVENTS = ROOT / "events"
NOT_BUILT = "run `make build` first (`make test` does): {} is missing"
STALE = "the build is older than the sources ({}): run `make build` again"
# ELF e_machine values (the ELF specification's EM_AARCH64 and EM_X86_64).
E_MACHINE = {"arm64": 183, "x86_64": 62}
NATIVE_NAME = re.compile(r"\.cpython-313-(aarch64|x86_64)-linux-gnu\.so$")

REGION = "us-east-1"
TABLE = "memory-built"
QUEUE = "consolidate-work.fifo"
VECTORS, INDEX = "memory-vectors", "passages"
KEYWORD_CLUSTER = "arn:aws:rds:us-east-1:123456789012:cluster:memory-keywords"
KEYWORD_SECRET = "arn:aws:secretsmanager:us-east-1:123456789012:secret:rds!cluster-AbCdEf"
SECRETS = {
    "memory-hash-key": "built-artifact-person-hash-key-" + "k" * 40,
    "bot-token": BOT_TOKEN,
    "embedding-key": "not-a-real-key",
}
BOT_USER_ID = "1399999999999999999"  # DiscordApplicationId: the bot's user id
MENTION = f"<@{BOT_USER_ID}> what am I allergic to?"


def this_machine() -> str:
    return {"aarch64": "arm64", "arm64": "arm64"}.get(platform.machine(), "x86_64")


def host_layer() -> Path:
    """The layer as built for this machine's architecture."""
    return ARM64_LAYER if this_machine() == "arm64" else X86_64_LAYER


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def python313() -> str:
    """This interpreter when it is 3.13 (make test's .venv), else the one make would find."""
    if sys.version_info[:2] == (3, 13):
        return sys.executable
    found = subprocess.run(
        [str(ROOT / "scripts" / "find_python.sh"), "3.13"], capture_output=True, text=True
    ).stdout.strip()
    assert found, "no Python 3.13 here: the built handlers run on the Lambda runtime's Python"
    return found


@pytest.fixture(scope="module")
def built() -> Path:
    """.aws-sam/build, checked to hold today's sources: the botmemory package, the pins of
    layers/core/requirements.txt and each function's handler."""
    for path in (BUILD / "template.yaml", ARM64_LAYER, X86_64_LAYER):
        assert path.exists(), NOT_BUILT.format(path.relative_to(ROOT))
    source = ROOT / "layers" / "core" / "botmemory"
    ours = {n for n in files_under(source) if "__pycache__" not in n}
    pins = {(str(name), str(version)) for name, version in versions(LAYER, DEPLOYED).items()}
    for layer in (ARM64_LAYER, X86_64_LAYER):
        copy = layer / "botmemory"
        where = f"botmemory in {layer.parent.name}"
        assert files_under(copy) == ours, STALE.format(where)
        for name in ours:
            assert filecmp.cmp(source / name, copy / name, shallow=False), STALE.format(name)
        distributions = [
            d.name.removesuffix(".dist-info").split("-") for d in layer.glob("*.dist-info")
        ]
        installed = {(str(canonicalize_name(name)), version) for name, version in distributions}
        assert installed == pins, STALE.format(f"the pins in {layer.parent.name}")
    template = Template.load()
    for logical_id in template.function_ids():
        spec = template.function(logical_id)
        copy = BUILD / logical_id / spec.module_path.name
        assert filecmp.cmp(spec.module_path, copy, shallow=False), STALE.format(copy.name)
    return BUILD


# --- the arm64 layer ------------------------------------------------------------------


def elf_machine(path: Path) -> int:
    """e_machine of a 64-bit little-endian ELF file (offset 18); 0 for anything else."""
    header = path.read_bytes()[:20]
    if header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
        return 0
    machine: int = struct.unpack_from("<H", header, 18)[0]
    return machine


def native_modules(layer: Path) -> list[Path]:
    return sorted(p for p in layer.rglob("*") if p.is_file() and ".so" in p.suffixes)


def test_the_arm64_layer_holds_the_files_of_its_x86_64_twin(built: Path) -> None:
    """The same pins and the same prune: file for file, native modules' names aside."""

    def neutral(names: set[str]) -> set[str]:
        return {NATIVE_NAME.sub(".cpython-313-ARCH-linux-gnu.so", n) for n in names}

    arm64, x86_64 = files_under(ARM64_LAYER), files_under(X86_64_LAYER)
    assert neutral(arm64) == neutral(x86_64), sorted(neutral(arm64) ^ neutral(x86_64))[:20]
    assert len(arm64) > 500 and any(n.startswith("boto3/") for n in arm64)


def test_every_native_module_of_the_arm64_layer_is_built_for_aarch64_and_cp313(
    built: Path,
) -> None:
    modules = native_modules(ARM64_LAYER)
    assert len(modules) >= 3  # pydantic-core, PyNaCl's libsodium, cffi's backend
    for module in modules:
        name = str(module.relative_to(ARM64_LAYER))
        assert elf_machine(module) == E_MACHINE["arm64"], f"{name}: not an AArch64 ELF file"
        # CPython 3.13's own ABI, or the stable ABI (a cp3X-abi3 wheel, X <= 13).
        assert name.endswith(".cpython-313-aarch64-linux-gnu.so") or name.endswith(".abi3.so"), name
    for wheel in ARM64_LAYER.glob("*.dist-info/WHEEL"):
        for tag in re.findall(r"^Tag: (\S+)$", wheel.read_text(), re.M):
            python, abi, platform_tag = tag.split("-")
            if platform_tag == "any":
                continue
            assert platform_tag.endswith("_aarch64"), (wheel.parent.name, tag)
            assert (python, abi) == ("cp313", "cp313") or (
                abi == "abi3" and int(python.removeprefix("cp3")) <= 13
            ), (wheel.parent.name, tag)
    # Its twin is what it says too: the check reads real headers.
    assert {elf_machine(m) for m in native_modules(X86_64_LAYER)} == {E_MACHINE["x86_64"]}


def test_the_arm64_layer_as_built_is_within_its_bound(built: Path) -> None:
    size = sum(p.stat().st_size for p in ARM64_LAYER.rglob("*") if p.is_file())
    print(f"arm64 layer as built: {size / 2**20:.1f} MiB")
    assert size <= layer_build.SIZE_LIMIT
    assert layer_build.pruned(ARM64_LAYER) == []


def test_the_layer_ships_the_time_zones_staff_may_choose(built: Path) -> None:
    """Lambda's image holds no zone files: `/memory-staff timezone` and every date written in
    a server's zone read the tzdata package's (botmemory.when.zones)."""
    for layer in (ARM64_LAYER, X86_64_LAYER):
        assert (layer / "tzdata" / "zoneinfo" / "Europe" / "Paris").is_file()
        assert (layer / "tzdata" / "zoneinfo" / "America" / "New_York").is_file()


# --- one round of the flow, on the built handlers --------------------------------------


class _InvokeRecorder(ThreadingHTTPServer):
    """Lambda's Invoke API, recording each asynchronous invoke's payload."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _InvokeHandler)
        self.invokes: list[tuple[str, dict[str, Any]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class _InvokeHandler(BaseHTTPRequestHandler):
    server: _InvokeRecorder

    def do_POST(self) -> None:
        # POST /2015-03-31/functions/{name}/invocations
        name = self.path.split("/functions/", 1)[1].split("/", 1)[0]
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.server.invokes.append((name, json.loads(body)))
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet."""


@dataclass
class Round:
    """The built functions on this machine's layer, against moto and the stand-ins."""

    moto_url: str
    work: Path
    template: Template
    environment: dict[str, dict[str, str]]
    recorder: _InvokeRecorder
    discord: FakeDiscordRest
    # (function, sequence number) of the stream records already delivered
    seen: set[tuple[str, str]] = field(default_factory=set)
    imported: set[str] = field(default_factory=set)
    logs: list[str] = field(default_factory=list)  # what the functions printed

    def client(self, service: str) -> Any:
        return boto3.client(service, region_name=REGION, endpoint_url=self.moto_url)

    def invoke(self, logical_id: str, *events: Any) -> list[Any]:
        """Run the built function on each event in one fresh process; its answers."""
        spec = self.template.function(logical_id)
        output = self.work / f"{logical_id}-{len(list(self.work.iterdir()))}.json"
        plan = {
            "function_dir": str(BUILD / logical_id),
            "layer_dir": str(host_layer()),
            "handler": spec.handler,
            "function_name": logical_id,
            "timeout_ms": int(spec.properties.get("Timeout", 3)) * 1000,
            "environment": self.environment[logical_id],
            "events": list(events),
            "output": str(output),
        }
        plan_file = output.with_suffix(".plan.json")
        plan_file.write_text(json.dumps(plan, default=_json_default))
        result = subprocess.run(
            # -B: Lambda's /opt and /var/task are read-only; no bytecode is written.
            [python313(), "-I", "-S", "-B", str(HOST), str(plan_file)],
            capture_output=True,
            text=True,
            timeout=180,
            env={"PATH": "/usr/bin:/bin"},
        )
        assert result.returncode == 0 and output.exists(), result.stderr[-3000:]
        report = json.loads(output.read_text())
        self.imported |= set(report["imported"])
        self.logs += result.stdout.splitlines() + result.stderr.splitlines()
        errors = [a["error"] for a in report["answers"] if "error" in a]
        assert not errors, f"{logical_id} failed:\n{errors[0][-3000:]}\n{result.stdout[-2000:]}"
        # A missing module behind a failure the function survives (it logs it and goes on).
        missing = [line for line in self.logs if "No module named" in line]
        assert not missing, f"{logical_id}: a module is missing: {missing[0][:2000]}"
        return [a["result"] for a in report["answers"]]

    def stream(self, logical_id: str) -> list[dict[str, Any]]:
        """The table's new stream records that pass the function's filter, as Lambda's
        event source delivers them."""
        streams = self.client("dynamodbstreams")
        arn = self.client("dynamodb").describe_table(TableName=TABLE)["Table"]["LatestStreamArn"]
        records: list[dict[str, Any]] = []
        for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
            iterator = streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
            while iterator:
                page = streams.get_records(ShardIterator=iterator, Limit=1000)
                records += page["Records"]
                iterator = page.get("NextShardIterator") if page["Records"] else None
        filters = self.template.stream_filters(logical_id)
        fresh = []
        for record in records:
            sequence = record["dynamodb"]["SequenceNumber"]
            if (logical_id, sequence) in self.seen or not passes_filters(filters, record):
                continue
            self.seen.add((logical_id, sequence))
            created = record["dynamodb"]["ApproximateCreationDateTime"]
            record["dynamodb"]["ApproximateCreationDateTime"] = int(created.timestamp())
            fresh.append({**record, "eventSourceARN": arn})
        return fresh

    def queued_work(self) -> list[dict[str, Any]]:
        """What waits on the work queue, as SQS events of one message (the worker's batch
        size), deleted from the queue as Lambda does after a success."""
        sqs = self.client("sqs")
        url = sqs.get_queue_url(QueueName=QUEUE)["QueueUrl"]
        events = []
        while True:
            messages = sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,
                MessageSystemAttributeNames=["All"],
            ).get("Messages", [])
            if not messages:
                return events
            for message in messages:
                events.append(
                    {
                        "Records": [
                            {
                                "messageId": message["MessageId"],
                                "receiptHandle": message["ReceiptHandle"],
                                "body": message["Body"],
                                "attributes": message.get("Attributes", {}),
                                "messageAttributes": {},
                                "md5OfBody": message["MD5OfBody"],
                                "eventSource": "aws:sqs",
                                "eventSourceARN": f"arn:aws:sqs:{REGION}:123456789012:{QUEUE}",
                                "awsRegion": REGION,
                            }
                        ]
                    }
                )
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime.datetime):
        return int(value.timestamp())
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(f"not JSON: {value!r}")


def _environments(
    template: Template, moto_url: str, queue_url: str, urls: dict[str, str]
) -> dict[str, dict[str, str]]:
    """Each function's environment: the template's (with this round's resources and
    parameters), the deployed search path, and Lambda's own variables."""
    parameters = {
        "DiscordPublicKey": TEST_PUBLIC_KEY,
        "DiscordApplicationId": BOT_USER_ID,
        "MemoryModel": "rules",
        "ChatModel": "rules",
        "ConsolidateEvery": "10",
        "BotTokenSecretName": "bot-token",
        "EmbeddingModel": "openai:fake-embed",
        "EmbeddingModelApiKeySecretName": "embedding-key",
        "MemoryModelBaseUrl": urls["embeddings"],
    }
    template.resource_names.update(
        MemoryTable=TABLE,
        HashKeySecret="memory-hash-key",
        ConsolidateWorkQueue=queue_url,
        AnswerFunction="AnswerFunction",
    )
    environments = {}
    for logical_id in template.function_ids():
        declared = template.function(logical_id, parameters).environment
        # A local run takes the "off" side of the template's search conditions: given here
        # as deployed, with the vector bucket made on moto and the keyword cluster's ARN.
        search = {
            "MEMORY_SEARCH_INDEX": f"s3vectors:{VECTORS}/{INDEX}",
            "MEMORY_KEYWORD_INDEX": f"postgres:{KEYWORD_CLUSTER}",
            "MEMORY_KEYWORD_DB_SECRET": KEYWORD_SECRET,
            "EMBEDDING_MODEL": parameters["EmbeddingModel"],
        }
        environments[logical_id] = {
            **declared,
            **{k: v for k, v in search.items() if k in declared},
            "AWS_ENDPOINT_URL": moto_url,
            "AWS_ENDPOINT_URL_DYNAMODB": moto_url,
            "AWS_ENDPOINT_URL_LAMBDA": urls["lambda"],
            "DISCORD_API_BASE": urls["discord"],
            # The samples are signed with fixed timestamps (events/README.md).
            "DISCORD_TIMESTAMP_TOLERANCE_SECONDS": "3153600000",
            "POWERTOOLS_TRACE_DISABLED": "true",
            # The deployed 800 ms is S3's; moto in a process beside a busy suite is slower.
            "MEMORY_SEARCH_TIMEOUT_MS": "10000",  # the most the settings take
            "AWS_LAMBDA_FUNCTION_NAME": logical_id,
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "AWS_REGION": REGION,
            "AWS_DEFAULT_REGION": REGION,
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",  # nosec B105 # moto's dummy credentials
            "AWS_CONFIG_FILE": "/dev/null",
            "AWS_SHARED_CREDENTIALS_FILE": "/dev/null",
            "LAMBDA_TASK_ROOT": str(BUILD / logical_id),
        }
    return environments


@pytest.fixture
def flow(built: Path, tmp_path: Path) -> Iterator[Round]:
    template = Template.load()
    with (
        MotoServer() as moto,
        FakeDiscordRest.running() as discord,
    ):
        embeddings, recorder = EmbeddingServer(), _InvokeRecorder()
        servers = [embeddings, recorder]
        threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
        for thread in threads:
            thread.start()
        try:
            setup = boto3.session.Session(
                aws_access_key_id="testing", aws_secret_access_key="testing", region_name=REGION
            )
            dynamodb = setup.client("dynamodb", endpoint_url=moto.url)
            dynamodb.create_table(**table_arguments(Template(template.body, {}), TABLE))
            queue_url = setup.client("sqs", endpoint_url=moto.url).create_queue(
                QueueName=QUEUE, Attributes={"FifoQueue": "true"}
            )["QueueUrl"]
            for name, value in SECRETS.items():
                setup.client("secretsmanager", endpoint_url=moto.url).create_secret(
                    Name=name, SecretString=value
                )
            vectors = setup.client("s3vectors", endpoint_url=moto.url)
            vectors.create_vector_bucket(vectorBucketName=VECTORS)
            index = template.resources["SearchVectorIndex"]["Properties"]
            vectors.create_index(
                vectorBucketName=VECTORS,
                indexName=INDEX,
                dataType=index["DataType"],
                dimension=int(template.parameter_defaults()["EmbeddingDimensions"]),
                distanceMetric=index["DistanceMetric"],
                metadataConfiguration={
                    "nonFilterableMetadataKeys": index["MetadataConfiguration"][
                        "NonFilterableMetadataKeys"
                    ]
                },
            )
            urls = {
                "embeddings": embeddings.base_url,
                "lambda": recorder.url,
                "discord": discord.url,
            }
            work = tmp_path / "runs"
            work.mkdir()
            yield Round(
                moto.url,
                work,
                template,
                _environments(template, moto.url, queue_url, urls),
                recorder,
                discord,
            )
        finally:
            for server in servers:
                server.shutdown()
                server.server_close()


def test_every_built_handler_serves_one_round_of_the_flow(flow: Round) -> None:
    batch = json.loads((EVENTS / "ingest" / "gateway-batch.json").read_text())
    # Alice of the sample, a few minutes after it, asks the bot.
    mention = copy.deepcopy(batch["events"][0])
    mention["d"].update(
        id=str(int(mention["d"]["id"]) + 10**12),
        content=MENTION,
        timestamp="2026-01-01T00:05:00.000000+00:00",
        mentions=[gw.user(BOT_USER_ID, bot=True)],
    )
    alice = mention["d"]["author"]["id"]

    (stored,) = flow.invoke("IngestFunction", {"events": [*batch["events"], mention]})
    assert stored["stored"] == 15 and stored["rejected"] == []
    ((target, answer_job),) = flow.recorder.invokes  # the mention's answer, started async
    assert target == "AnswerFunction" and answer_job["answer"]["content"].endswith("allergic to?")

    observations = flow.stream("ConsolidateFunction")
    assert len(observations) == 15  # the observation INSERTs alone pass the filter
    size = int(flow.template.stream_source("ConsolidateFunction")["BatchSize"])
    batches = [{"Records": observations[i : i + size]} for i in range(0, 15, size)]
    for answer in flow.invoke("ConsolidateFunction", *batches):
        assert answer == {"batchItemFailures": []}

    work = flow.queued_work()
    assert work, "ConsolidateFunction handed no work to the queue"
    for answer in flow.invoke("ConsolidateWorkerFunction", *work):
        assert answer == {"batchItemFailures": []}

    removals = flow.stream("SearchIndexFunction")
    assert removals, "the round consumed observations: the stream has their changes"
    (answer,) = flow.invoke("SearchIndexFunction", {"Records": removals})
    assert answer == {"batchItemFailures": []}

    (swept,) = flow.invoke(
        "SweepFunction", json.loads((EVENTS / "sweep/schedule.json").read_text())
    )
    assert set(swept) == {"enqueued", "failed", "complete"}

    request = json.loads((EVENTS / "recall" / "request.json").read_text())
    request["query"] = "What is Alice allergic to?"
    (recalled,) = flow.invoke("RecallFunction", request)
    assert request["user_id"] == alice
    facts = [f["text"] for f in recalled["facts"][alice]]
    assert any("peanuts" in fact for fact in facts), facts
    # moto has no QueryVectors: the vector leg fails there and the keyword leg (moto's Data
    # API) answers alone, as either leg does when the other fails (docs/search.md).
    assert recalled["search"] == "keywords_only" and "peanuts" in recalled["system_prompt"]
    # The round's passages went into S3 Vectors: the server's own index, made on first use.
    vectors = flow.client("s3vectors")
    (server_index,) = [
        i["indexName"]
        for i in vectors.list_indexes(vectorBucketName=VECTORS)["indexes"]
        if i["indexName"] != INDEX
    ]
    stored_vectors = vectors.list_vectors(vectorBucketName=VECTORS, indexName=server_index)
    assert stored_vectors["vectors"], server_index

    show = json.loads((EVENTS / "interactions" / "memory-show.json").read_text())
    (shown,) = flow.invoke("InteractionsFunction", show)
    assert shown["statusCode"] == 200, shown
    assert "peanuts" in json.loads(shown["body"])["data"]["content"]

    (answered,) = flow.invoke("AnswerFunction", answer_job)
    assert answered["status"] == "answered" and answered["posted"] == 1, answered
    (posted,) = flow.discord.channel_messages[mention["d"]["channel_id"]]
    assert "peanut" in posted["content"].lower(), posted

    # Every module came from the built function's folder, the layer or the standard library.
    layer, functions = str(host_layer()), str(BUILD)
    strays = [f for f in flow.imported if not f.startswith((layer, functions))]
    assert strays == [], strays
    assert any(f.startswith(f"{layer}/boto3/") for f in flow.imported)


def test_a_module_the_layer_lacks_fails_the_handler_that_needs_it(
    flow: Round, tmp_path: Path
) -> None:
    """What a prune too many does: PyNaCl's signing gone, InteractionsFunction cannot start."""
    import shutil

    pruned = tmp_path / "layer"
    shutil.copytree(host_layer(), pruned, symlinks=True)
    (pruned / "nacl" / "signing.py").unlink()
    ping = json.loads((EVENTS / "interactions" / "ping.json").read_text())

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sys.modules[__name__], "host_layer", lambda: pruned)
        with pytest.raises(AssertionError, match=r"No module named 'nacl\.signing'"):
            flow.invoke("InteractionsFunction", ping)
