# Two commands do all the set-up on a fresh machine:
#   make demo   - create .venv, install everything, run the main job on embedded defaults
#   make test   - create/install what the suite needs, then run the whole suite
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Re-install when any project or environment manifest changes.
MANIFESTS := pyproject.toml $(wildcard environments/*/pyproject.toml)
STAMP := $(VENV)/.installed

.PHONY: demo test venv system lint bench clean

system:
	@bash scripts/setup-system.sh

$(STAMP): $(MANIFESTS) scripts/install.sh
	@bash scripts/install.sh $(PYTHON) $(VENV)
	@touch $(STAMP)

venv: system $(STAMP)

demo: venv
	@bash scripts/demo.sh

test: venv
	@bash scripts/run-tests.sh

lint: venv
	$(BIN)/ruff check verifiers hub environments tests benchmarks

bench: venv
	$(BIN)/python benchmarks/rollouts.py
	$(BIN)/python benchmarks/hot_path.py --instructions
	$(BIN)/python benchmarks/import_time.py
	$(BIN)/python benchmarks/memory.py --with-original
	$(BIN)/python benchmarks/sandbox.py
	$(BIN)/python benchmarks/hub.py
	$(BIN)/python benchmarks/check.py
	$(BIN)/python benchmarks/orchestrator.py
	$(BIN)/python benchmarks/train.py
	$(BIN)/python benchmarks/vllm_server.py
	$(BIN)/python benchmarks/resume_memory.py
	$(BIN)/python benchmarks/hub_limits.py
	$(BIN)/python benchmarks/serve.py
	$(BIN)/python benchmarks/harness.py

clean:
	rm -rf $(VENV) .pytest_cache outputs
