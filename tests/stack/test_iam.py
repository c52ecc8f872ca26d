"""What each function may touch, read from the template as CloudFormation receives it (after
the SAM transform): no wildcard that template.yaml does not justify, secrets only where they
are read, models only by their configured ids, the self-invoke by the function's own ARN.
tests/stack/test_least_privilege.py checks the other direction: that each role allows what its
code really calls."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.sam_tools import TEMPLATE, translated_template

FUNCTIONS = (
    "InteractionsFunction",
    "IngestFunction",
    "ConsolidateFunction",
    "ConsolidateWorkerFunction",
    "RecallFunction",
    "SweepFunction",
    "SearchIndexFunction",
    "AnswerFunction",
)
# AWS managed policies a role may carry, and why: their statements are not in the template.
MANAGED_POLICIES = {
    # logs:CreateLogStream and logs:PutLogEvents; the function's log group is its own.
    "AWSLambdaBasicExecutionRole": "CloudWatch Logs for the function",
    # X-Ray has no resource-level permissions: Tracing: Active needs PutTraceSegments on *.
    "AWSXrayWriteOnlyAccess": "Lambda's active tracing",
}
# Functions that hash a person's id (opt-outs, erasure markers) and so read the hash key.
# AnswerFunction records its own answers as observations, which checks the opt-out list.
HASHERS = {
    "InteractionsFunction",
    "IngestFunction",
    "ConsolidateWorkerFunction",
    "AnswerFunction",
}
WILDCARD = re.compile(r"[*?]")


@pytest.fixture(scope="module")
def translated() -> dict[str, Any]:
    return translated_template()


def branches(value: Any) -> Iterator[Any]:
    """Every value a conditional may take (both sides of each Fn::If; NoValue dropped)."""
    if isinstance(value, dict) and set(value) == {"Fn::If"}:
        for side in value["Fn::If"][1:]:
            yield from branches(side)
    elif value != {"Ref": "AWS::NoValue"}:
        yield value


def listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def documents(resource: dict[str, Any]) -> Iterator[dict[str, Any]]:
    properties = resource.get("Properties", {})
    if resource["Type"] == "AWS::IAM::Role":
        for policy in properties.get("Policies", []):
            yield policy["PolicyDocument"]
    elif resource["Type"] in {"AWS::IAM::ManagedPolicy", "AWS::IAM::RolePolicy"}:
        yield properties["PolicyDocument"]


def statements_of(resource: dict[str, Any]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for document in documents(resource):
        for statement in listed(document["Statement"]):
            found += [s for s in branches(statement) if isinstance(s, dict)]
    return found


def role_of(translated: dict[str, Any], function: str) -> str:
    role = translated["Resources"][function]["Properties"]["Role"]
    assert set(role) == {"Fn::GetAtt"}, f"{function}: role {role}"
    name: str = role["Fn::GetAtt"][0]
    return name


def role_statements(translated: dict[str, Any], role: str) -> list[dict[str, Any]]:
    """A role's inline policies, its customer managed policies and its role policies."""
    resources = translated["Resources"]
    found = statements_of(resources[role])
    for attached in resources[role]["Properties"].get("ManagedPolicyArns", []):
        for arn in branches(attached):  # a conditional policy: when its condition holds
            if isinstance(arn, dict) and "Ref" in arn:
                found += statements_of(resources[arn["Ref"]])
    for resource in resources.values():
        if resource["Type"] == "AWS::IAM::RolePolicy" and resource["Properties"]["RoleName"] == {
            "Ref": role
        }:
            found += statements_of(resource)
    return found


def function_statements(translated: dict[str, Any], function: str) -> list[dict[str, Any]]:
    return role_statements(translated, role_of(translated, function))


def text_of(value: Any) -> str:
    """The literal text of an ARN, however it is written (`Fn::Sub` keeps its placeholders)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Sub" in value:
        sub = value["Fn::Sub"]
        return sub if isinstance(sub, str) else str(sub[0])
    return ""  # Ref / GetAtt: one named resource


def wildcards(statement: dict[str, Any]) -> list[str]:
    values = listed(statement.get("Action", [])) + listed(statement.get("Resource", []))
    return [text_of(v) for v in values if WILDCARD.search(text_of(v))]


def justification(sid: str) -> str | None:
    """The `# Wildcard: ...` comment written above the statement `Sid` in template.yaml
    (above its `- !If` and condition lines when it is conditional). Every statement with
    that Sid needs one; None when any lacks it, or there is no such statement."""
    lines = TEMPLATE.read_text(encoding="utf-8").splitlines()
    found = []
    for index, line in enumerate(lines):
        if line.strip() != f"- Sid: {sid}":
            continue
        comments: list[str] = []
        for above in reversed(lines[:index]):
            text = above.strip()
            if text.startswith("#"):
                comments.append(text)
            elif not re.fullmatch(r"- (!If|[A-Za-z0-9]+)", text):
                break
        reasons = [c for c in comments if re.fullmatch(r"# Wildcard: .{10,}", c)]
        if not reasons:
            return None
        found.append(reasons[0])
    return found[0] if found else None


def all_statements(translated: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for logical_id, resource in translated["Resources"].items():
        for statement in statements_of(resource):
            yield logical_id, statement


def test_every_wildcard_is_justified_in_the_template(translated: dict[str, Any]) -> None:
    unjustified = []
    for owner, statement in all_statements(translated):
        found = wildcards(statement)
        if found and not (statement.get("Sid") and justification(statement["Sid"])):
            unjustified.append(f"{owner} {statement.get('Sid', '(no Sid)')}: {found}")
    assert unjustified == [], "wildcards without a `# Wildcard:` comment:\n" + "\n".join(
        unjustified
    )


def test_no_statement_grants_a_whole_service(translated: dict[str, Any]) -> None:
    for owner, statement in all_statements(translated):
        for action in listed(statement.get("Action", [])):
            assert action != "*" and not action.endswith(":*"), f"{owner}: {action}"


def test_the_wildcard_check_catches_an_unjustified_wildcard() -> None:
    # The check itself: a statement with a wildcard and no comment above its Sid fails.
    assert wildcards({"Sid": "Nowhere", "Action": "s3:GetObject", "Resource": "*"}) == ["*"]
    assert justification("Nowhere") is None
    assert justification("ReadTableStream") is None  # no wildcard there, no comment
    assert justification("ListTableStreams") is not None


def test_only_known_aws_managed_policies_are_attached(translated: dict[str, Any]) -> None:
    for logical_id, resource in translated["Resources"].items():
        if resource["Type"] != "AWS::IAM::Role":
            continue
        for attached in resource["Properties"].get("ManagedPolicyArns", []):
            # A conditional policy (Fn::If) is one of its branches, or none (AWS::NoValue).
            branches = attached["Fn::If"][1:] if "Fn::If" in attached else [attached]
            for arn in branches:
                if arn == {"Ref": "AWS::NoValue"}:
                    continue
                if isinstance(arn, dict) and "Ref" in arn:
                    kind = translated["Resources"][arn["Ref"]]["Type"]
                    assert kind == "AWS::IAM::ManagedPolicy"  # one of ours, checked above
                    continue
                name = text_of(arn).rsplit("/", 1)[-1]
                assert name in MANAGED_POLICIES, f"{logical_id}: AWS managed policy {name}"


def _secret_readers(translated: dict[str, Any], secret: str | dict[str, Any]) -> set[str]:
    readers = set()
    for function in FUNCTIONS:
        for statement in function_statements(translated, function):
            if "secretsmanager:GetSecretValue" not in listed(statement["Action"]):
                continue
            for resource in listed(statement["Resource"]):
                if resource == secret or (isinstance(secret, str) and secret in text_of(resource)):
                    readers.add(function)
    return readers


def _environment(translated: dict[str, Any], function: str) -> dict[str, Any]:
    properties = translated["Resources"][function]["Properties"]
    variables: dict[str, Any] = properties.get("Environment", {}).get("Variables", {})
    return variables


def test_the_hash_key_reaches_only_the_functions_that_hash(translated: dict[str, Any]) -> None:
    assert _secret_readers(translated, {"Ref": "HashKeySecret"}) == HASHERS
    for function in FUNCTIONS:
        environment = _environment(translated, function)
        assert environment.get("MEMORY_HASH_KEY", "") == ""  # never a key in plain sight
        if function in HASHERS:
            assert environment["MEMORY_HASH_KEY_SECRET"] == {"Ref": "HashKeySecret"}


def test_api_keys_are_secrets_read_only_by_their_callers(translated: dict[str, Any]) -> None:
    model_key = "${MemoryModelApiKeySecretName}"
    embedding_key = "${EmbeddingModelApiKeySecretName}"
    assert _secret_readers(translated, model_key) == {"ConsolidateWorkerFunction"}
    assert _secret_readers(translated, embedding_key) == {
        "ConsolidateWorkerFunction",
        "RecallFunction",
        "AnswerFunction",  # its recall embeds the question
    }
    chat_key = "${ChatModelApiKeySecretName}"
    assert _secret_readers(translated, chat_key) == {"AnswerFunction"}
    for function in FUNCTIONS:
        environment = _environment(translated, function)
        # Only the secret's name travels in the environment, never a key.
        assert "MEMORY_MODEL_API_KEY" not in environment
        assert "EMBEDDING_MODEL_API_KEY" not in environment
    # No parameter is a secret typed into the stack (NoEcho values end up in plain sight).
    assert not any(p.get("NoEcho") for p in translated["Parameters"].values())


def test_only_the_answering_function_reads_the_bot_token(translated: dict[str, Any]) -> None:
    # Only answers are posted as the bot; commands' follow-ups use the interaction's webhook.
    readers = {f for f in FUNCTIONS if "DISCORD_BOT_TOKEN_SECRET" in _environment(translated, f)}
    assert readers == {"AnswerFunction"}
    assert _secret_readers(translated, "${BotTokenSecretName}") == {"AnswerFunction"}


def test_bedrock_is_allowed_only_on_the_configured_models(translated: dict[str, Any]) -> None:
    for function in FUNCTIONS:
        for statement in function_statements(translated, function):
            if "bedrock:InvokeModel" not in listed(statement["Action"]):
                continue
            assert listed(statement["Action"]) == ["bedrock:InvokeModel"]
            for resource in listed(statement["Resource"]):
                arn = text_of(resource)
                if arn.endswith("foundation-model/*"):
                    # Any region's model, only through the configured inference profile.
                    condition = statement["Condition"]["StringEquals"]
                    profile = condition["bedrock:InferenceProfileArn"]
                    assert "inference-profile/${ModelId}" in text_of(profile)
                else:
                    assert arn.endswith("/${ModelId}"), arn
                    assert "${AWS::Region}" in arn
    model_users = {
        f
        for f in FUNCTIONS
        if any(
            "bedrock:InvokeModel" in listed(s["Action"]) for s in function_statements(translated, f)
        )
    }
    assert model_users == {
        "ConsolidateWorkerFunction",
        "RecallFunction",
        "AnswerFunction",
    }


def test_functions_invoke_only_themselves_or_the_answer_function(
    translated: dict[str, Any],
) -> None:
    invokers: dict[str, list[str]] = {}
    for function in FUNCTIONS:
        for statement in function_statements(translated, function):
            if "lambda:InvokeFunction" in listed(statement["Action"]):
                (target,) = listed(statement["Resource"])
                assert set(target) == {"Fn::GetAtt"}, target  # one function, by its ARN
                invokers.setdefault(function, []).append(target["Fn::GetAtt"][0])
    assert {f: sorted(t) for f, t in invokers.items()} == {
        # Deferred command work (itself) and /ask.
        "InteractionsFunction": ["AnswerFunction", "InteractionsFunction"],
        "IngestFunction": ["AnswerFunction"],  # mentions, replies to the bot, DMs
        "AnswerFunction": ["AnswerFunction"],  # a long export goes on in the next invocation
    }


def test_stream_readers_read_only_the_memory_tables_stream(translated: dict[str, Any]) -> None:
    for function in ("ConsolidateFunction", "SearchIndexFunction"):
        readers = [
            s
            for s in function_statements(translated, function)
            if "dynamodb:GetRecords" in listed(s["Action"])
        ]
        assert [s["Resource"] for s in readers] == [{"Fn::GetAtt": ["MemoryTable", "StreamArn"]}]


def test_only_recall_reads_the_dm_notes_parameter_and_only_that_one(
    translated: dict[str, Any],
) -> None:
    """The deployment's notes for direct messages (botmemory.memory.notes) are read by recall
    alone: RecallFunction, and AnswerFunction's own recall; the grant names that parameter."""
    notes_arn = "arn:${AWS::Partition}:ssm:${AWS::Region}:${AWS::AccountId}:parameter"
    notes_arn += "${DmNotesParameterName}"
    readers = set()
    for function in FUNCTIONS:
        for statement in function_statements(translated, function):
            resources = [text_of(r) for r in listed(statement["Resource"])]
            if any("DmNotesParameterName" in r for r in resources):
                assert listed(statement["Action"]) == ["ssm:GetParameter"], statement
                assert resources == [notes_arn], statement
                readers.add(function)
    assert readers == {"RecallFunction", "AnswerFunction"}
    policy = translated["Resources"]["DmNotesParameterPolicy"]
    assert policy["Condition"] == "HasDmNotesParameter"  # no parameter, no grant
    # The other functions get at most its name (`/memory show` says notes exist).
    named = {f for f in FUNCTIONS if "DM_NOTES_PARAMETER" in _environment(translated, f)}
    assert named == {"RecallFunction", "AnswerFunction", "InteractionsFunction"}


def s3vectors_statements(translated: dict[str, Any], function: str) -> list[dict[str, Any]]:
    return [
        s
        for s in function_statements(translated, function)
        if any(str(a).startswith("s3vectors:") for a in listed(s["Action"]))
    ]


def server_indexes(resource: Any) -> bool:
    """The servers' own indexes: the shared index's ARN followed by "-*"
    (botmemory.search.shards names them "<shared>-g<guild id>", "<shared>-dm")."""
    sub = resource.get("Fn::Sub") if isinstance(resource, dict) else None
    return (
        isinstance(sub, list)
        and sub[0] == "${IndexArn}-*"
        and sub[1] == {"IndexArn": {"Fn::GetAtt": ["SearchVectorIndex", "IndexArn"]}}
    )


SHARED_INDEX = {"Fn::GetAtt": ["SearchVectorIndex", "IndexArn"]}
# The consolidation worker writes a round's passages; AnswerFunction a corrected fact's. The
# stream consumer and the sweep only hand work out.
INDEX_CREATORS = {"ConsolidateWorkerFunction", "AnswerFunction"}


def test_search_indexes_are_reached_only_on_the_shared_index_and_the_servers_own(
    translated: dict[str, Any],
) -> None:
    for function in FUNCTIONS:
        for statement in s3vectors_statements(translated, function):
            for resource in listed(statement["Resource"]):
                assert resource == SHARED_INDEX or server_indexes(resource), (function, resource)


def test_only_the_writers_create_server_indexes_and_none_deletes_one(
    translated: dict[str, Any],
) -> None:
    """CreateIndex only where passages are written (a server's first write creates its index),
    only on the servers' indexes, never the shared one; DeleteIndex (a purge) and GetIndex
    are no function's: `python -m botmemory.ops.purge_index` runs with the operator's rights."""
    creators = set()
    for function in FUNCTIONS:
        for statement in s3vectors_statements(translated, function):
            actions = listed(statement["Action"])
            assert "s3vectors:DeleteIndex" not in actions, function
            assert "s3vectors:GetIndex" not in actions, function
            assert not any(str(a).endswith("*") for a in actions), (function, actions)
            if "s3vectors:CreateIndex" in actions:
                creators.add(function)
                assert actions == ["s3vectors:CreateIndex"], (function, actions)
                assert all(server_indexes(r) for r in listed(statement["Resource"])), function
    assert creators == INDEX_CREATORS


# --- the keyword database (MEMORY_KEYWORD_INDEX, botmemory.search.postgres_index) ---------

KEYWORD_ACTIONS = {"rds-data:ExecuteStatement", "secretsmanager:GetSecretValue"}
CLUSTER = {"Fn::GetAtt": ["KeywordDbCluster", "DBClusterArn"]}
CLUSTER_SECRET = {"Fn::GetAtt": ["KeywordDbCluster", "MasterUserSecret.SecretArn"]}


def keyword_statements(translated: dict[str, Any], function: str) -> list[dict[str, Any]]:
    return [
        s
        for s in function_statements(translated, function)
        if any(str(a).startswith("rds-data:") for a in listed(s["Action"]))
        or any(r == CLUSTER_SECRET for r in listed(s.get("Resource")))
    ]


def test_the_keyword_database_is_reached_where_vectors_are_and_nowhere_else(
    translated: dict[str, Any],
) -> None:
    """Exactly the functions with vector rights run keyword statements, through the Data API
    on the one cluster, as its managed secret: no transactions, no other database."""
    found = set()
    for function in FUNCTIONS:
        vectors = [
            a for s in s3vectors_statements(translated, function) for a in listed(s["Action"])
        ]
        statements = keyword_statements(translated, function)
        if not vectors:
            assert statements == [], f"{function} has no search, yet reaches the keyword database"
            continue
        found.add(function)
        actions = {a for s in statements for a in listed(s["Action"])}
        assert actions == KEYWORD_ACTIONS, (function, actions)
        for statement in statements:
            assert statement["Effect"] == "Allow"
            expected = (
                CLUSTER
                if "rds-data:ExecuteStatement" in listed(statement["Action"])
                else CLUSTER_SECRET
            )
            assert listed(statement["Resource"]) == [expected], (function, statement)
    assert found == {
        "RecallFunction",
        "ConsolidateWorkerFunction",
        "AnswerFunction",
        "SearchIndexFunction",
    }
    assert translated["Resources"]["KeywordDbPolicy"]["Condition"] == "KeywordOn"


def test_the_functions_are_given_the_cluster_and_secret_they_may_use(
    translated: dict[str, Any],
) -> None:
    spec = _environment(translated, "RecallFunction")["MEMORY_KEYWORD_INDEX"]
    assert spec == {
        "Fn::If": ["KeywordOff", "", {"Fn::Sub": "postgres:${KeywordDbCluster.DBClusterArn}"}]
    }
    secret = _environment(translated, "RecallFunction")["MEMORY_KEYWORD_DB_SECRET"]
    assert secret == {"Fn::If": ["KeywordOff", "", CLUSTER_SECRET]}
    for function in FUNCTIONS:
        assert _environment(translated, function)["MEMORY_KEYWORD_INDEX"] == spec, function


def test_only_staff_commands_and_the_bot_joining_send_to_the_catch_up_queue(
    translated: dict[str, Any],
) -> None:
    """CatchUpQueue's tasks, besides CatchUpFunction's own next pages (its role of its own):
    staff's `/memory-staff backfill start` (InteractionsFunction) and the bot joining a server
    where chosen (IngestFunction, botmemory.catchup.on_join); SendMessage alone, on that queue
    alone."""
    queue = {"Fn::GetAtt": ["CatchUpQueue", "Arn"]}
    senders = set()
    for function in FUNCTIONS:
        for statement in function_statements(translated, function):
            if queue in listed(statement["Resource"]) and "sqs:SendMessage" in listed(
                statement["Action"]
            ):
                assert listed(statement["Resource"]) == [queue], statement
                assert listed(statement["Action"]) == ["sqs:SendMessage"], statement
                senders.add(function)
    assert senders == {"InteractionsFunction", "IngestFunction"}
