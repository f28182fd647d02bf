# gpu-orchestrator. `make demo` and `make test` work from a fresh machine: they
# create the venv and build the pinned control-plane binaries on first use.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
TESTENV_DIR ?= .testenv
NODES ?= 4
GPUS ?= 4
KUBECONFIG_LOCAL := $(TESTENV_DIR)/kubeconfig
KUBECTL := kubectl --kubeconfig=$(KUBECONFIG_LOCAL)
PYTEST_ARGS ?=

.PHONY: help venv tools testenv test unit integration lint fmt cluster-up cluster-down demo run manifests bench mutation clean

help:
	@echo "make demo          local control plane + config/ installed, prints the GPU nodes"
	@echo "make test          every test (unit + integration on a real local control plane)"
	@echo "make lint          ruff"
	@echo "make cluster-up    the local control plane alone (NODES=, GPUS=); kubeconfig $(KUBECONFIG_LOCAL)"
	@echo "make cluster-down  stops what cluster-up started"
	@echo "make run           the controller against the current kubeconfig"
	@echo "make manifests     regenerates config/crd from api/v1alpha1"
	@echo "make mutation      mutation score of the placement core (slow; MUTANTS='internal.scheduling.snapshot*' for one module)"

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(STAMP)

testenv:
	@bash hack/testenv/build.sh >/dev/null

# promtool (Debian's prometheus package), for the alert rule tests
tools:
	@bash hack/install-tools.sh

test: venv tools testenv
	$(BIN)/pytest tests $(PYTEST_ARGS)

unit: venv
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: venv testenv
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

lint: venv
	$(BIN)/ruff check .

fmt: venv
	$(BIN)/ruff check --fix .

cluster-up: venv testenv
	$(BIN)/python -m hack.testenv up --dir $(TESTENV_DIR) --nodes $(NODES) --gpus $(GPUS)

cluster-down: venv
	$(BIN)/python -m hack.testenv down --dir $(TESTENV_DIR)

# The demo brings the control plane up, installs config/, runs the controller and the
# webhook, applies the samples and the seed StatefulSet, prints what a user would
# look at, and stops everything again (KEEP=1 leaves it all running).
demo: cluster-up
	@trap '[ "$(KEEP)" = 1 ] || $(MAKE) --no-print-directory cluster-down' EXIT; set -e; \
	echo; echo "== kubectl get nodes (GPU capacity)"; \
	$(KUBECTL) get nodes -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].type,GPUS:.status.capacity.nvidia\.com/gpu,ALLOCATABLE:.status.allocatable.nvidia\.com/gpu,INTERNAL-IP:.status.addresses[?(@.type=="InternalIP")].address'; \
	$(BIN)/python -m hack.demo --dir $(TESTENV_DIR); \
	echo; echo "== kubectl get crds"; \
	$(KUBECTL) get crds; \
	if [ "$(KEEP)" = 1 ]; then echo; echo "left running: export KUBECONFIG=$(KUBECONFIG_LOCAL); make cluster-down to stop"; fi

run: venv
	$(BIN)/python main.py manager $(RUN_ARGS)

manifests: venv
	$(BIN)/python -m api.v1alpha1.crd

bench: venv testenv
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)

# Mutation testing of the placement core (internal/scheduling, runtime/workqueue.py)
# against its unit tests; configured under [tool.mutmut] in pyproject.toml. Not part
# of `make test` or CI: a whole run takes 15-30 minutes on 2 cores. MUTANTS=GLOB
# (mutmut names, e.g. 'internal.scheduling.snapshot*') reruns only those and keeps
# the other results; without it the run starts afresh. Log: mutants/run.log.
MUTANTS ?=
MUTATION_JOBS ?= 2
mutation: venv
	$(BIN)/pip install -q -e '.[dev,mutation]'
	@if [ -z "$(MUTANTS)" ]; then rm -rf mutants; fi; mkdir -p mutants
	@echo "mutmut run $(MUTANTS) (log: mutants/run.log)"
	@nice -n 10 $(BIN)/mutmut run --max-children $(MUTATION_JOBS) $(foreach m,$(MUTANTS),'$(m)') >mutants/run.log 2>&1 \
		|| { tail -30 mutants/run.log; exit 1; }
	@$(BIN)/python -m hack.mutation $(if $(MUTANTS),--only '$(subst *,,$(firstword $(MUTANTS)))')

clean: cluster-down
	rm -rf $(VENV) $(TESTENV_DIR) .pytest_cache .ruff_cache .hypothesis mutants
