"""The manager's ``--default-strategy`` reaches a workload whose spec names none
(the CRD sets no default), and ``status.strategy`` (the STRATEGY column) shows the
strategy used; a pending workload shows 0 GPUs and the Scheduled reason."""

from __future__ import annotations

from controllers.gpuworkload.options import Options
from tests.unit.controllers.fakes import Env


def test_a_spec_without_a_strategy_is_placed_with_the_managers_default() -> None:
    env = Env(nodes=2, gpus=4)
    env.rec = env.new_reconciler(options=Options(default_strategy="bestFit"))
    env.workload("a", gpusPerReplica=1)
    env.workload("b", gpusPerReplica=1, schedulingStrategy="roundRobin")
    env.settle("a")
    env.settle("b")
    assert env.status("a")["strategy"] == "bestFit"
    assert env.status("b")["strategy"] == "roundRobin"
    # bestFit packs: the second bestFit workload goes to the node already in use
    env.workload("c", gpusPerReplica=1)
    env.settle("c")
    assert env.status("c")["placements"][0]["node"] == env.status("a")["placements"][0]["node"]


def test_without_a_default_strategy_it_is_least_loaded() -> None:
    env = Env()
    env.workload("a", gpusPerReplica=1)
    env.settle("a")
    assert env.status("a")["strategy"] == "leastLoaded"


def test_a_pending_workload_holds_0_gpus_and_its_reason_is_in_the_status() -> None:
    env = Env(gpus=1)
    env.workload("big", gpusPerReplica=2)
    env.settle("big")
    st = env.status("big")
    assert st["phase"] == "Pending" and st["gpus"] == 0 and not st.get("nodes")
    assert env.condition("big", "Scheduled")["reason"] == "Unschedulable"
    assert "node1: 1 free GPU, needs 2" in st["message"]


def test_a_workload_without_a_template_says_it_runs_the_default_image() -> None:
    env = Env()
    env.workload("bare", gpusPerReplica=1)
    env.edit("bare", lambda o: o["spec"].pop("template"))
    env.settle("bare")
    image = env.pod("bare-0")["spec"]["containers"][0]["image"]
    assert image == "busybox:1.36"
    assert "DefaultTemplate" in env.normals("bare")
    env.workload("given", gpusPerReplica=1)
    env.settle("given")
    assert "DefaultTemplate" not in env.normals("given")
