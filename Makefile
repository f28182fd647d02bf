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
# The images `make docker-build` builds and `make deploy` installs (kustomize images:).
IMG ?= gpu-orchestrator:0.1.0
CHECK_IMG ?= gpu-scheduler-check:0.1.0
CONTAINER_TOOL ?= docker
CHECKOV_VENV ?= .venv-checkov
CHECKOV_VERSION := $(shell sed -n 's/.*"checkov==\([^"]*\)".*/\1/p' pyproject.toml)

.PHONY: help venv tools testenv peers test unit integration soak lint fmt cluster-up cluster-down demo run manifests charts bench clean docker-build docker-push deploy undeploy mutation

# `make help` prints every target with the text after its `##`
# (tests/unit/install/test_make_help.py fails on a target without one).
help: ## this list
	@awk -F ':[^#]*## ' '/^[a-z][a-z0-9_-]*:[^=]*## / {printf "make %-13s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@touch $@

venv: $(STAMP) ## the virtualenv .venv with the project and its dev tools (on first use of most targets)

testenv: ## builds the pinned control-plane binaries and helm into ~/.cache/gpu-orchestrator/testenv
	@bash hack/testenv/build.sh >/dev/null

# On demand only (not in testenv, test or CI): the benchmark's `--systems kueue` and
# hack.testenv.peers.peer() build the one they need.
PEERS ?= kueue jobset lws trainer
peers: ## builds Kueue, JobSet, LeaderWorkerSet and Kubeflow Trainer from their Go modules into the same cache (PEERS=)
	@bash hack/testenv/peers.sh $(PEERS)

# promtool (Debian's prometheus package), for the alert rule tests
tools: ## installs promtool (Debian's prometheus package) for the alert rule tests
	@bash hack/install-tools.sh

test: venv tools testenv ## every test (unit + integration on a real local control plane)
	$(BIN)/pytest tests $(PYTEST_ARGS)

unit: venv ## the unit tests only (no control plane)
	$(BIN)/pytest tests/unit $(PYTEST_ARGS)

integration: venv testenv ## the integration tests only (local control plane)
	$(BIN)/pytest tests/integration $(PYTEST_ARGS)

# The churn tests as a soak (not in CI): the churn at 100 nodes x 8 GPUs, then the queue
# churn (three GPUQueues in a cohort), then the group churn (JobSets beside queued
# GPUWorkloads and shares), each for SOAK_SECONDS (600) with nine kill -9s,
# two kube-apiserver restarts and a 20 s etcd pause, seed SEED (1); each prints its
# overlaps, quota overshoots, stuck workloads and orphans lost at the end.
SOAK_SECONDS ?= 600
SEED ?= 1
soak: venv testenv ## the churn tests (100 x 8 GPUs; queues in a cohort) for SOAK_SECONDS (600) with kill -9s, kube-apiserver restarts and an etcd pause (SEED=, not in CI)
	@mkdir -p $(TESTENV_DIR)
	CHURN_SEED=$(SEED) CHURN_SECONDS=$(SOAK_SECONDS) CHURN_NODES=100 CHURN_GPUS=8 \
	  CHURN_LIVE=450 CHURN_KILLS=9 CHURN_PACE=0.2 CHURN_RESTARTS=2 CHURN_ETCD_PAUSE=20 \
	  CHURN_LOG=$(TESTENV_DIR)/soak-$(SEED).log \
	  $(BIN)/pytest -s -q --timeout=$$(( $(SOAK_SECONDS) + 900 )) \
	  tests/integration/controller/test_churn.py
	CHURN_SEED=$(SEED) CHURN_SECONDS=$(SOAK_SECONDS) CHURN_KILLS=9 CHURN_RESTARTS=2 \
	  CHURN_ETCD_PAUSE=20 CHURN_LOG=$(TESTENV_DIR)/soak-queues-$(SEED).log \
	  $(BIN)/pytest -s -q --timeout=$$(( $(SOAK_SECONDS) + 900 )) \
	  tests/integration/controller/test_queues_churn.py
	CHURN_SEED=$(SEED) GROUP_CHURN_SECONDS=$(SOAK_SECONDS) CHURN_KILLS=9 CHURN_RESTARTS=2 \
	  CHURN_LOG=$(TESTENV_DIR)/soak-groups-$(SEED).log \
	  $(BIN)/pytest -s -q --timeout=$$(( $(SOAK_SECONDS) + 900 )) \
	  tests/integration/podgroups/test_group_churn.py

$(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION):
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -q --upgrade pip
	$(CHECKOV_VENV)/bin/pip install -q 'checkov==$(CHECKOV_VERSION)'
	@touch $@

# checkov lives in its own venv: its packaging<24 pin conflicts with pytest's.
# kubeconform (hack/testenv/kubeconform.sh builds the pinned version into the cache)
# validates against schemas made from the pinned kube-apiserver and config/crd.
lint: venv testenv $(CHECKOV_VENV)/.stamp-$(CHECKOV_VERSION) ## ruff, chart copies in step with config/, checkov and kubeconform on config/ and the charts
	$(BIN)/ruff check .
	$(BIN)/python -m hack.charts --check
	@bins="$$(bash hack/testenv/build.sh 2>/dev/null | tail -1)" && set -x && \
	$(BIN)/python -m hack.checkmanifests --checkov $(CHECKOV_VENV)/bin/checkov --helm "$$bins/helm" && \
	$(BIN)/python -m hack.kubeconform --kubeconform "$$(bash hack/testenv/kubeconform.sh | tail -1)" \
	  --testenv "$$bins" --helm "$$bins/helm"

fmt: venv ## ruff --fix
	$(BIN)/ruff check --fix .

cluster-up: venv testenv ## the local control plane alone (NODES=, GPUS=); kubeconfig .testenv/kubeconfig
	$(BIN)/python -m hack.testenv up --dir $(TESTENV_DIR) --nodes $(NODES) --gpus $(GPUS)

cluster-down: venv ## stops what cluster-up started
	$(BIN)/python -m hack.testenv down --dir $(TESTENV_DIR)

# The demo brings the control plane up, installs config/, runs the controller and the
# webhook, applies the samples and the seed StatefulSet, prints what a user would
# look at, and stops everything again (KEEP=1 leaves it all running).
demo: cluster-up ## local control plane + config/ installed, prints the GPU nodes (KEEP=1 leaves it running)
	@trap '[ "$(KEEP)" = 1 ] || $(MAKE) --no-print-directory cluster-down' EXIT; set -e; \
	echo; echo "== kubectl get nodes (GPU capacity)"; \
	$(KUBECTL) get nodes -o custom-columns='NAME:.metadata.name,STATUS:.status.conditions[?(@.type=="Ready")].type,GPUS:.status.capacity.nvidia\.com/gpu,ALLOCATABLE:.status.allocatable.nvidia\.com/gpu,INTERNAL-IP:.status.addresses[?(@.type=="InternalIP")].address'; \
	$(BIN)/python -m hack.demo --dir $(TESTENV_DIR); \
	if [ "$(KEEP)" = 1 ]; then echo; echo "left running: export KUBECONFIG=$(KUBECONFIG_LOCAL); make cluster-down to stop"; fi

# Leader election is on (the Lease gpu-orchestrator-system/gpu-orchestrator-leader), so a
# `make run` beside the demo's controller or an installed Deployment stands by instead of
# placing too; RUN_ARGS=--leader-elect=false still refuses while another leader is live.
run: venv ## the controller against the current kubeconfig (RUN_ARGS=)
	$(BIN)/python main.py manager $(RUN_ARGS)

manifests: venv ## regenerates config/crd from api/v1alpha1 (and the charts' copies)
	$(BIN)/python -m api.v1alpha1.crd
	$(BIN)/python -m hack.charts

# Copies config/'s CRDs, RBAC, alert rules and dashboard into charts/gpu-orchestrator/files.
charts: venv ## copies config/ into charts/gpu-orchestrator/files (python -m hack.charts)
	$(BIN)/python -m hack.charts

# As kubebuilder projects do: build and push the images, then install config/ with
# them. `make deploy` writes a kustomize overlay (.deploy/, git-ignored) whose
# images: entries point gpu-orchestrator and gpu-scheduler-check at IMG and CHECK_IMG,
# and applies it to the current kubeconfig's cluster. Nothing under config/ changes.
docker-build: ## builds IMG and CHECK_IMG
	$(CONTAINER_TOOL) build -t $(IMG) -f Dockerfile .
	$(CONTAINER_TOOL) build -t $(CHECK_IMG) -f Dockerfile.check .

docker-push: ## pushes IMG and CHECK_IMG
	$(CONTAINER_TOOL) push $(IMG)
	$(CONTAINER_TOOL) push $(CHECK_IMG)

deploy: venv ## kubectl apply -k config with IMG (WEBHOOK=1: the webhook too)
	$(BIN)/python -m hack.deploy --img '$(IMG)' --check-img '$(CHECK_IMG)' $(if $(filter 1,$(WEBHOOK)),--webhook) --out .deploy
	kubectl apply -k .deploy

undeploy: venv ## kubectl delete what deploy applied
	$(BIN)/python -m hack.deploy --img '$(IMG)' --check-img '$(CHECK_IMG)' $(if $(filter 1,$(WEBHOOK)),--webhook) --out .deploy
	kubectl delete --ignore-not-found -k .deploy

bench: venv testenv ## the placement benchmark on a local control plane (BENCH_ARGS=)
	$(BIN)/pip install -q -e '.[dev,bench]'
	$(BIN)/python -m bench $(BENCH_ARGS)

# Mutation testing of the placement core (internal/scheduling, runtime/workqueue.py)
# against its unit tests; configured under [tool.mutmut] in pyproject.toml. Not part
# of `make test` or CI: a whole run takes 15-30 minutes on 2 cores. MUTANTS=GLOB
# (mutmut names, e.g. 'internal.scheduling.snapshot*') reruns only those and keeps
# the other results; without it the run starts afresh. Log: mutants/run.log.
MUTANTS ?=
MUTATION_JOBS ?= 2
mutation: venv ## mutation score of the placement core (slow; MUTANTS='internal.scheduling.snapshot*')
	$(BIN)/pip install -q -e '.[dev,mutation]'
	@if [ -z "$(MUTANTS)" ]; then rm -rf mutants; fi; mkdir -p mutants
	@echo "mutmut run $(MUTANTS) (log: mutants/run.log)"
	@nice -n 10 $(BIN)/mutmut run --max-children $(MUTATION_JOBS) $(foreach m,$(MUTANTS),'$(m)') >mutants/run.log 2>&1 \
		|| { tail -30 mutants/run.log; exit 1; }
	@$(BIN)/python -m hack.mutation $(if $(MUTANTS),--only '$(subst *,,$(firstword $(MUTANTS)))')

clean: cluster-down ## stops the cluster and removes the venvs, .testenv, .deploy and caches
	rm -rf $(VENV) $(CHECKOV_VENV) $(TESTENV_DIR) .deploy .pytest_cache .ruff_cache .hypothesis mutants
