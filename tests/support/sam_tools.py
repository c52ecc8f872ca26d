"""The SAM tools the template tests run: cfn-lint, `sam validate` and the real SAM
translator, all offline (dummy credentials, no telemetry)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "template.yaml"
SAM_VENV = ROOT / ".venv-sam" / "bin"
SAM = SAM_VENV / "sam"
MISSING_SAM = (
    ".venv-sam/bin/sam is missing: run `make sam-venv` "
    "(aws-sam-cli lives in its own virtualenv; `make test` builds it)"
)
# Run by .venv-sam's python: the real SAM translator, local code paths swapped for S3 URIs
# the way `sam package` would, the translated CloudFormation template on stdout.
TRANSLATE = """
import json, sys
from samcli.yamlhelper import yaml_parse
from samtranslator.translator.transform import transform

class NoManagedPolicies:
    def load(self):
        raise AssertionError("the translator asked IAM for managed policies")

template = yaml_parse(open(sys.argv[1], encoding="utf-8").read())
for resource in template.get("Resources", {}).values():
    properties = resource.get("Properties", {})
    for key in ("CodeUri", "ContentUri"):
        if isinstance(properties.get(key), str) and not properties[key].startswith("s3://"):
            properties[key] = "s3://artifact-bucket/" + properties[key].strip("/")
json.dump(transform(template, {}, NoManagedPolicies()), sys.stdout, indent=1, default=str)
"""


def cfn_lint(path: Path) -> subprocess.CompletedProcess[str]:
    # cfn-lint has no `python -m cfnlint`; run its console entry point with this interpreter.
    return subprocess.run(
        [sys.executable, "-c", "import sys; from cfnlint.runner import main; sys.exit(main())"]
        + [str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )


def sam_environment() -> dict[str, str]:
    """Dummy credentials, no profile, no telemetry: the SAM tools run offline."""
    environment = {
        name: value
        for name, value in os.environ.items()
        if name not in {"AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN"}
    }
    environment.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_DEFAULT_REGION="us-east-1",
        SAM_CLI_TELEMETRY="0",
    )
    return environment


def translate(template: Path = TEMPLATE) -> subprocess.CompletedProcess[str]:
    """The SAM translator run on a template; CloudFormation JSON on stdout."""
    return subprocess.run(
        [str(SAM_VENV / "python"), "-c", TRANSLATE, str(template)],
        cwd=ROOT,
        env=sam_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )


@lru_cache(maxsize=1)
def translated_template() -> dict[str, Any]:
    """template.yaml as CloudFormation will see it, after the SAM transform."""
    assert SAM.exists(), MISSING_SAM
    result = translate()
    assert result.returncode == 0, f"SAM translation failed:\n{result.stderr}"
    loaded: dict[str, Any] = json.loads(result.stdout)
    return loaded


def load_template(path: Path) -> dict[str, Any]:
    """A template as written (CloudFormation short forms need cfn-lint's loader)."""
    from cfnlint.decode import cfn_yaml  # type: ignore[import-untyped]

    loaded: dict[str, Any] = cfn_yaml.loads(path.read_text(encoding="utf-8"), str(path))
    return loaded


def assert_lint_clean(path: Path) -> None:
    result = cfn_lint(path.relative_to(ROOT))
    assert result.returncode == 0, f"cfn-lint found problems:\n{result.stdout}{result.stderr}"


def assert_sam_validates(path: Path) -> None:
    """`sam validate` (no --lint): the real SAM translator, offline."""
    assert SAM.exists(), MISSING_SAM
    result = subprocess.run(
        [str(SAM), "validate", "--region", "us-east-1", "--template", str(path)],
        cwd=ROOT,
        env=sam_environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "is a valid SAM Template" in output, output
