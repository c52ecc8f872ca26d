"""The documented deploy works: samconfig.toml holds what `sam deploy` needs, read by SAM's
own code, and every question `sam deploy --guided` asks that has a wrong default is
answered in docs/deploy.md (SAM's own code says which resources it asks about)."""

from __future__ import annotations

import json
import re
import subprocess
from functools import lru_cache
from typing import Any

from tests.support.sam_tools import (
    MISSING_SAM,
    ROOT,
    SAM_VENV,
    load_template,
    sam_environment,
    translated_template,
)

TEMPLATE = ROOT / "template.yaml"
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
# Run by .venv-sam's python: `sam deploy`'s settings as SAM reads them from samconfig.toml
# (global and deploy sections merged), its parameter overrides parsed as SAM parses them,
# and the resources `sam deploy --guided` asks "has no authentication. Is this okay?" about.
SAM_DEPLOY_VIEW = """
import json, sys
from samcli.cli.types import CfnParameterOverridesType
from samcli.commands.deploy.auth_utils import auth_per_resource
from samcli.lib.config.samconfig import SamConfig
from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider

settings = SamConfig(sys.argv[1], "samconfig.toml").get_all(["deploy"], "parameters", "default")
overrides = CfnParameterOverridesType().convert(settings.get("parameter_overrides", []), None, None)
stacks, _ = SamLocalStackProvider.get_stacks(
    sys.argv[2],
    parameter_overrides={"DiscordPublicKey": "0" * 64, "DiscordApplicationId": "1" * 18},
    global_parameter_overrides={"AWS::Region": settings.get("region", "us-east-1")},
)
unauthenticated = [name for name, authorized in auth_per_resource(stacks) if not authorized]
json.dump(
    {"settings": settings, "overrides": overrides, "unauthenticated": unauthenticated},
    sys.stdout,
    default=str,
)
"""


@lru_cache(maxsize=1)
def sam_deploy_view() -> dict[str, Any]:
    python = SAM_VENV / "python"
    assert python.exists(), MISSING_SAM
    result = subprocess.run(
        [str(python), "-c", SAM_DEPLOY_VIEW, str(ROOT), str(TEMPLATE)],
        cwd=ROOT,
        env=sam_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    view: dict[str, Any] = json.loads(result.stdout)
    return view


def template_parameters() -> dict[str, dict[str, Any]]:
    parameters: dict[str, dict[str, Any]] = load_template(TEMPLATE)["Parameters"]
    return parameters


def test_samconfig_holds_the_stack_region_capabilities_bucket_and_confirmation() -> None:
    settings = sam_deploy_view()["settings"]

    assert settings["stack_name"] == "discord-memory"
    assert re.fullmatch(r"[a-z]{2}(-[a-z]+)+-\d", settings["region"])
    assert settings["resolve_s3"] is True  # SAM's own artifacts bucket, made on first use
    assert settings["confirm_changeset"] is True
    assert settings["capabilities"] == "CAPABILITY_IAM"


def test_capability_iam_is_all_the_translated_template_needs() -> None:
    # CAPABILITY_NAMED_IAM: a role or policy with a fixed name; AUTO_EXPAND: a nested
    # application or a macro. The translated template has neither.
    resources = translated_template()["Resources"].values()
    # The name property that makes each IAM resource "named" (a RolePolicy's RoleName only
    # refers to a role).
    naming = {
        "AWS::IAM::Role": "RoleName",
        "AWS::IAM::ManagedPolicy": "ManagedPolicyName",
        "AWS::IAM::User": "UserName",
        "AWS::IAM::Group": "GroupName",
        "AWS::IAM::InstanceProfile": "InstanceProfileName",
    }
    assert [r for r in resources if r["Type"] == "AWS::IAM::Role"], "CAPABILITY_IAM is needed"
    for resource in resources:
        name = naming.get(str(resource["Type"]))
        assert name is None or name not in resource.get("Properties", {}), resource
    assert not [r for r in resources if r["Type"] == "AWS::CloudFormation::Stack"]
    assert "Transform" not in translated_template()


def test_samconfig_names_every_parameter_ops_must_fill_and_only_template_parameters() -> None:
    overrides: dict[str, str] = sam_deploy_view()["overrides"]
    parameters = template_parameters()
    required = {name for name, spec in parameters.items() if "Default" not in spec}

    assert set(overrides) <= set(parameters), set(overrides) - set(parameters)
    assert required <= set(overrides), required - set(overrides)


def test_a_placeholder_left_in_samconfig_fails_the_deploy_at_once() -> None:
    # The values shipped are placeholders: CloudFormation refuses each (AllowedPattern),
    # so a forgotten one never deploys a bot that trusts a made-up key.
    overrides: dict[str, str] = sam_deploy_view()["overrides"]
    parameters = template_parameters()

    for name, value in overrides.items():
        if "Default" in parameters[name]:
            continue
        pattern = parameters[name]["AllowedPattern"]
        assert "REPLACE" in value and not re.fullmatch(pattern, value), (name, value)


def test_every_guided_question_about_authentication_is_answered_in_the_deploy_doc() -> None:
    unauthenticated: list[str] = sam_deploy_view()["unauthenticated"]
    doc = DEPLOY_DOC.read_text(encoding="utf-8")

    assert unauthenticated == ["InteractionsFunction Function Url"]
    for resource in unauthenticated:
        question = f"{resource} has no authentication. Is this okay? [y/N]"
        rows = [line for line in doc.splitlines() if question in line]
        assert rows and "| **y**." in rows[0], f"docs/deploy.md must answer {question!r}"


def test_the_deploy_doc_names_every_parameter_the_guided_deploy_asks_for_without_a_default() -> (
    None
):
    doc = DEPLOY_DOC.read_text(encoding="utf-8")
    for name, spec in template_parameters().items():
        if "Default" not in spec:
            assert f"`Parameter {name} [REPLACE-…]`" in doc, name
