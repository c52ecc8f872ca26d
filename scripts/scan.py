"""`make scan`: checkov on the templates as CloudFormation sees them, bandit on the code.

Every accepted finding is recorded where it lives, with its reason, so that any new one fails
the run: in a template, a resource's `Metadata: checkov: skip: [{id: CKV_..., comment: why}]`;
in the code, `# nosec B123 # why` on the line. A skip without a reason, or one that no
longer matches a finding, fails too. checkov scans template.yaml after the SAM transform
(the resources CloudFormation creates, Metadata kept) and relay/template.yaml as written.
The tools run from .venv-scan (requirements-scan.lock); the SAM translator from .venv-sam.

    python scripts/scan.py
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.support.sam_tools import load_template, translate  # noqa: E402

SCAN_BIN = ROOT / ".venv-scan" / "bin"
TEMPLATE = ROOT / "template.yaml"
RELAY_TEMPLATE = ROOT / "relay" / "template.yaml"
CODE = ("layers/core", "functions", "relay", "localrun")
# `# nosec B101 # why`: bandit reads the ids up to the second "#"; the rest is the reason.
NOSEC = re.compile(r"#\s*nosec\b(?P<rest>.*)$")
NOSEC_WITH_REASON = re.compile(r"^\s+B\d{3}(?:\s*,\s*B\d{3})*\s+#\s*\S.{7,}")
# SAM generates these from a Serverless::Function and drops its Metadata on the way.
GENERATED_FROM_FUNCTION = ("Url",)


def checkov_skips(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """{logical id: its Metadata checkov skips}."""
    found = {}
    for logical_id, resource in template.get("Resources", {}).items():
        skips = (resource.get("Metadata") or {}).get("checkov", {}).get("skip")
        if skips is not None:
            found[logical_id] = skips
    return found


def unexplained_skips(template: dict[str, Any]) -> list[str]:
    """Skips that name no check or give no reason."""
    problems = []
    for logical_id, skips in checkov_skips(template).items():
        if not isinstance(skips, list):
            problems.append(f"{logical_id}: Metadata.checkov.skip is not a list")
            continue
        for skip in skips:
            if not isinstance(skip, dict) or not re.fullmatch(
                r"CKV2?_[A-Z]+_\d+", str(skip.get("id"))
            ):
                problems.append(f"{logical_id}: a checkov skip names no check id: {skip!r}")
            elif len(str(skip.get("comment") or "").split()) < 3:
                problems.append(f"{logical_id}: checkov skip {skip['id']} gives no reason")
    return problems


def carry_generated_skips(source: dict[str, Any], translated: dict[str, Any]) -> None:
    """A function's skips also hold for the resources SAM makes of it (its Function URL)."""
    resources = translated["Resources"]
    for logical_id, skips in checkov_skips(source).items():
        if source["Resources"][logical_id].get("Type") != "AWS::Serverless::Function":
            continue
        for suffix in GENERATED_FROM_FUNCTION:
            if logical_id + suffix in source["Resources"]:
                continue  # declared in the template: its own Metadata speaks for it
            generated = resources.get(logical_id + suffix)
            if generated is not None and "Metadata" not in generated:
                generated["Metadata"] = {"checkov": {"skip": skips}}


def nosec_problems(paths: list[Path]) -> list[str]:
    """`# nosec` comments that name no test id or give no reason."""
    problems = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            match = NOSEC.search(line)
            if match and not NOSEC_WITH_REASON.match(match.group("rest")):
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
                where = f"{shown}:{number}"
                problems.append(f"{where}: write `# nosec B123 # why` (the test id and a reason)")
    return problems


def code_files() -> list[Path]:
    return sorted(
        p for top in CODE for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts
    )


def _checkov(path: Path) -> dict[str, Any]:
    result = subprocess.run(
        [
            str(SCAN_BIN / "checkov"),
            "--file",
            str(path),
            "--framework",
            "cloudformation",
            "--output",
            "json",
            "--compact",
            "--skip-download",
        ],
        # Offline: no policy mappings from the vendor's platform.
        env={**os.environ, "BC_SKIP_MAPPING": "TRUE", "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": ""},
        capture_output=True,
        text=True,
        timeout=600,
    )
    if result.returncode not in (0, 1) or not result.stdout.strip():
        raise SystemExit(f"checkov could not scan {path.name}:\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    if isinstance(report, list):  # one report per framework
        (report,) = [r for r in report if r.get("check_type") == "cloudformation"]
    if report.get("summary", {}).get("parsing_errors"):
        raise SystemExit(f"checkov could not parse {path.name}")
    return dict(report)


def checkov_problems(name: str, path: Path, template: dict[str, Any]) -> tuple[list[str], str]:
    """Findings without a recorded skip, and skips of `template` (as written) that match no
    finding on their resource or on what SAM generated from it."""
    report = _checkov(path)
    results = report.get("results", {})
    problems = [
        f"{name}: {f['resource']}: {f['check_id']} {f['check_name']} (fix it, or record a skip "
        "with its reason in the resource's Metadata)"
        for f in results.get("failed_checks", [])
    ]
    used = {
        (c["resource"].split(".", 1)[1], c["check_id"]) for c in results.get("skipped_checks", [])
    }
    for logical_id, skips in checkov_skips(template).items():
        for skip in skips:
            where = {logical_id, *(logical_id + suffix for suffix in GENERATED_FROM_FUNCTION)}
            if isinstance(skip, dict) and not any((w, skip.get("id")) in used for w in where):
                problems.append(f"{name}: {logical_id}: skip {skip.get('id')} matches no finding")
    summary = report.get("summary", {})
    line = (
        f"checkov {summary.get('checkov_version', '?')}, {name}: {summary.get('passed', 0)} passed, "
        f"{summary.get('failed', 0)} failed, {summary.get('skipped', 0)} accepted with a reason"
    )
    return problems, line


def bandit_problems() -> tuple[list[str], str]:
    result = subprocess.run(
        [str(SCAN_BIN / "bandit"), "--recursive", *CODE, "--format", "json", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if not result.stdout.strip():
        raise SystemExit(f"bandit did not run:\n{result.stderr[-2000:]}")
    report = json.loads(result.stdout)
    problems = [
        f"bandit: {r['filename']}:{r['line_number']}: {r['test_id']} {r['issue_text']}"
        for r in report.get("results", [])
    ]
    problems += [f"bandit: {e['filename']}: {e['reason']}" for e in report.get("errors", [])]
    totals = report.get("metrics", {}).get("_totals", {})
    line = (
        f"bandit on {', '.join(CODE)}: {len(report.get('results', []))} findings, "
        f"{totals.get('skipped_tests', 0)} accepted with `# nosec B… # why`"
    )
    return problems, line


def main() -> None:
    for tool in ("checkov", "bandit"):
        if not (SCAN_BIN / tool).exists():
            raise SystemExit(f".venv-scan/bin/{tool} is missing: run `make scan-venv`")
    source = load_template(TEMPLATE)
    relay = load_template(RELAY_TEMPLATE)
    problems = unexplained_skips(source) + unexplained_skips(relay) + nosec_problems(code_files())
    result = translate(TEMPLATE)
    if result.returncode != 0:
        raise SystemExit(f"the SAM translator failed:\n{result.stderr[-2000:]}")
    translated = json.loads(result.stdout)
    carry_generated_skips(source, translated)
    lines = []
    with tempfile.TemporaryDirectory(prefix="scan-") as tmp:
        out = Path(tmp) / "template.json"
        out.write_text(json.dumps(translated))
        found, line = checkov_problems("template.yaml (translated)", out, source)
        problems += found
        lines.append(line)
    found, line = checkov_problems("relay/template.yaml", RELAY_TEMPLATE, relay)
    problems += found
    lines.append(line)
    found, line = bandit_problems()
    problems += found
    lines.append(line)
    print("\n".join(lines))
    if problems:
        print(
            "\n".join(["", "make scan: new or unexplained findings:", *problems]), file=sys.stderr
        )
        raise SystemExit(1)


if __name__ == "__main__":
    main()
