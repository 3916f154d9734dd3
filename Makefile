# Two entry points: `make report` (run the pipeline to results/report.html) and `make test`.
# Both create the virtual environment on first use and reuse it while envs/cpu.lock.txt is unchanged.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
CORES ?= 8
LOCK := envs/cpu.lock.txt
STAMP := $(VENV)/.installed-$(shell cat $(LOCK) pyproject.toml | sha1sum | cut -c1-12)
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup report test dry-run lock clean-results

setup: $(STAMP)

$(STAMP): $(LOCK) pyproject.toml
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --no-deps -r $(LOCK)
	$(VENV)/bin/pip install --quiet --no-deps --no-build-isolation -e .
	@rm -f $(VENV)/.installed-* && touch $@
	@echo "environment ready: $(VENV)"

report: setup
	snakemake --cores $(CORES)

dry-run: setup
	snakemake --cores $(CORES) --dry-run

test: setup
	bash scripts/setup-test-system.sh
	python -m pytest

# Re-resolve the pinned environment from envs/requirements-cpu.in (needs the package index).
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet -r envs/requirements-cpu.in
	.lock-venv/bin/pip uninstall --yes torchvision torchaudio torchcodec
	{ sed -n '1,/^[^#]/{/^#/p}' $(LOCK); .lock-venv/bin/pip freeze --all | grep -v "^pip=="; } > $(LOCK).new && mv $(LOCK).new $(LOCK)
	rm -rf .lock-venv

clean-results:
	rm -rf results logs benchmarks
