# Entry points: `make report` (run the pipeline to results/report.html), `make test` (every
# test), `make test-fast` (pure-Python tests, under a minute) and `make lint`. Each creates the
# virtual environment on first use and reuses it while envs/cpu.lock.txt is unchanged.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
CORES ?= 8
LOCK := envs/cpu.lock.txt
STAMP := $(VENV)/.installed-$(shell cat $(LOCK) pyproject.toml envs/setup-venv.sh | sha1sum | cut -c1-12)
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup report test test-fast test-cluster lint dry-run plan lock lock-checksums clean-results stage-times config-docs

setup: $(STAMP)

$(STAMP): $(LOCK) pyproject.toml envs/setup-venv.sh
	PYTHON=$(PYTHON) envs/setup-venv.sh $(VENV)
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "environment ready: $(VENV)"

report: setup
	snakemake --cores $(CORES)

dry-run: setup
	snakemake --cores $(CORES) --dry-run

# What the configured run's measurements will take: the windowed passes from the config, each
# expected from an earlier run's latencies here, and that run's stage times.
plan: setup
	python scripts/plan.py

# The whole tree: Python (ruff lint and format), the rule files (snakefmt), both workflows (snakemake --lint).
lint: setup
	ruff check .
	ruff format --check .
	snakefmt --check .
	snakemake --lint
	snakemake --lint --snakefile workflow/run_comparison/Snakefile --config runs='[baseline, candidate]'

# Two groups, each timed: the fast tests (pure Python, the reference server, dry runs) on three
# pytest-xdist workers as `make test-fast`, but those that bound a time by the machine's jitter
# (marked timing) in one process, alone: their planted faults were seen failing only with a CPU
# to spare. Then the slow ones (real vLLM, the tiny model's pipeline run once and shared), in one
# process: run beside each other on two cores they measured each other (a vLLM validity check
# and two timing tests failed in one of two tries).
test: setup
	bash scripts/setup-test-system.sh
	@started=$$(date +%s); echo "== test group 1 of 2: fast"; python -m pytest -m "not slow and not timing" -n 3 && \
	python -m pytest -m "not slow and timing"; status=$$?; \
	echo "== test group fast took $$(( $$(date +%s) - started )) s"; exit $$status
	@started=$$(date +%s); echo "== test group 2 of 2: slow (real engines and pipeline runs)"; \
	python -m pytest -m "slow and not cluster"; status=$$?; \
	echo "== test group slow took $$(( $$(date +%s) - started )) s"; exit $$status

# The pipeline through SLURM's sbatch on a one-node cluster started on this machine (root:
# the setup script installs SLURM and munge; tests/slurm.py starts and stops the daemons).
test-cluster: setup
	bash scripts/setup-test-system.sh cluster
	@started=$$(date +%s); echo "== cluster tests (SLURM)"; python -m pytest -m cluster; status=$$?; \
	echo "== cluster tests took $$(( $$(date +%s) - started )) s"; exit $$status

# Three pytest workers (pytest-xdist) on two cores: most of the fast tests' time is waiting on
# reference servers' schedules (on D: 64 s with two, 53-55 s with three, 53 s with four).
# The timing tests allow for the contention they measure; `make test` runs them alone.
test-fast: setup
	python -m pytest -m "not slow" -n 3

# config/README.md from the descriptions and defaults in workflow/schemas/config.schema.yaml.
config-docs: setup
	python scripts/config_docs.py

# Re-resolve the pinned environment from envs/requirements-cpu.in (needs the package index).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r envs/requirements-cpu.in
	.lock-venv/bin/pip uninstall --yes torchvision torchaudio torchcodec
	{ sed -n '1,/^[^#]/{/^#/p}' $(LOCK); .lock-venv/bin/pip freeze --all | grep -v "^pip=="; } > $(LOCK).new && mv $(LOCK).new $(LOCK)
	rm -rf .lock-venv
	$(MAKE) lock-checksums

# The conda environments' post-deploy scripts carry the checksum of what they install, so
# that Snakemake (which hashes the YAML and the post-deploy script) rebuilds them on a change.
lock-checksums:
	sed -i "s/^LOCK_SHA256=.*/LOCK_SHA256=$$(sha256sum $(LOCK) | cut -d' ' -f1)/" envs/cpu.post-deploy.sh
	sed -i "s/^REQUIREMENTS_SHA256=.*/REQUIREMENTS_SHA256=$$(sha256sum envs/cuda.requirements.txt | cut -d' ' -f1)/" envs/cuda.post-deploy.sh

clean-results:
	rm -rf results logs benchmarks

# docs/stage-times.md from this run's Snakemake run-time records (benchmarks/).
stage-times: setup
	python scripts/stage_times.py --benchmarks benchmarks --output docs/stage-times.md
