"""A dra pod group placed before every member exists (a JobSet under ``startupPolicy:
InOrder``: controllers/podbinding/leaderfirst.py): the GPUs of the members not made
yet are read from the ResourceClaimTemplates their pod template names
(memberclaims.read_slot), the group waits while a template is not cached and is
refused for a template (or a shared claim) it cannot place; each member made later
takes its slot once kube-controller-manager made its claim, which is allocated to
exactly the slot's devices before its Binding. (Before, such a group was refused:
its later members' claims did not exist.)"""

from __future__ import annotations

import copy
from typing import Any

from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from controllers.podbinding.memberclaims import MemberClaimsReader, read_slot
from controllers.podbinding.seedbook import GROUP_SLOTS_ANNOTATION
from internal.scheduling.podgroups import pod_group
from runtime.store import Indexer
from tests.unit.controllers.podbinding.fixtures import (
    ALL_FREE,
    jobset_member,
    slots_of,
    staged_jobset,
    wired,
)
from tests.unit.controllers.podbinding.test_member_claims import CLASS, DraEnv, exactly
from tests.unit.controllers.podbinding.test_podbinding import NS

LAUNCHER = "staged-launcher-0-0"
KEY = f"PodGroup:{NS}/jobset:staged:0"


def dra_spec(template: str | None = None, claim: str | None = None) -> dict[str, Any]:
    """A pod spec asking its GPUs through a claim from ``template`` (or the shared
    ResourceClaim ``claim``), no nvidia.com/gpu."""
    entry: dict[str, Any] = {"name": "gpus"}
    entry.update({"resourceClaimTemplateName": template} if template
                 else {"resourceClaimName": claim})
    return {"resourceClaims": [entry],
            "containers": [{"name": "c", "resources": {"claims": [{"name": "gpus"}]}}]}


def dra_job(pods: int, **spec: Any) -> dict[str, Any]:
    return {"spec": {"parallelism": pods, "completions": pods, "completionMode": "Indexed",
                     "template": {"spec": dra_spec(**spec)}}}


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name, "namespace": NS},
            "spec": {"spec": {"devices": {"requests": list(requests)}}}}


def dra_pod(rj: str, job: int, tmpl: str) -> dict[str, Any]:
    p = jobset_member("staged", rj, job, 0)
    p["spec"] = {**p["spec"], **dra_spec(tmpl)}
    return p


class StagedDraEnv(DraEnv):
    """DraEnv (node3, node4 sliced) serving JobSet ``staged``: a launcher of 1 pod
    asking a claim from template ``one``, then 2 worker Jobs of 1 pod each from
    ``workers`` (default ``two``), made once the launcher is ready."""

    def __init__(self, **workers: Any) -> None:
        self.templates = Indexer()
        self.jobset = staged_jobset(dra_job(1, template="one"),
                                    dra_job(1, **(workers or {"template": "two"})))
        super().__init__()

    def owners(self, api: str, kind: str, ns: str, name: str) -> dict[str, Any] | None:
        return self.jobset if (kind, name) == ("JobSet", "staged") else None

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        rec = wired(self, options or PodBindingOptions(), lambda p: pod_group(p, self.owners))
        rec.groups.claims = MemberClaimsReader(self.client, getattr(self, "claims", None),
                                               CLASS, CLASS, self.templates)
        return rec

    def launched(self) -> None:
        """The launcher made, its claim made by kube-controller-manager, reconciled."""
        self.add(dra_pod("launcher", 0, "one"))
        self.made(LAUNCHER, exactly(1))
        self.reconcile(LAUNCHER)

    def allocated(self, name: str) -> list[str]:
        c = self.claims.get_by_name(f"{name}-gpus", NS)
        assert c["status"]["reservedFor"] == [
            {"resource": "pods", "name": name, "uid": f"uid-{name}"}], c["status"]
        return [r["device"] for r in c["status"]["allocation"]["devices"]["results"]]


def test_the_whole_jobset_is_placed_at_its_launcher_and_each_worker_gets_its_slots_claim(
        ) -> None:
    env = StagedDraEnv()
    env.templates.add(template("one", exactly(1)))
    env.launched()
    # the workers' template is not cached yet: the group waits, holding nothing
    assert env.bound() == {} and env.held() == ALL_FREE
    (said,) = env.reasons(LAUNCHER, "WaitingForGroup")
    assert f"ResourceClaimTemplate {NS}/two of the members 1-2 of pod group " \
           f"{NS}/jobset:staged:0 not made yet" in said and "is not in the cache yet" in said
    env.templates.add(template("two", exactly(2)))
    env.reconcile(LAUNCHER)
    (node, devs) = env.bound()[LAUNCHER]
    assert node in ("node3", "node4") and len(devs.split(",")) == 1
    assert env.allocated(LAUNCHER) == [f"gpu-{devs}"]
    shown = env.show_binding(LAUNCHER)
    env.reconcile(LAUNCHER)
    slots = slots_of(shown["metadata"]["annotations"][GROUP_SLOTS_ANNOTATION])
    # the workers' slots: 2 devices each (their template's count), on sliced nodes,
    # held by the group
    assert sorted(slots) == [1, 2]
    for n, d in slots.values():
        assert n in ("node3", "node4") and len(d.split(",")) == 2
        assert all(env.holder(n, int(x)) == KEY for x in d.split(","))
    held = env.held()
    assert sum(len(v) for v in held.values()) == 5
    for job in (1, 0):  # made later, in any order
        name = f"staged-workers-{job}-0"
        env.add(dra_pod("workers", job, "two"))
        env.reconcile(name)
        # its claim is not made yet: it waits, and its slot stays held for it
        assert name not in env.bound() and env.held() == held
        env.made(name, exactly(2))
        env.reconcile(name)
        assert env.bound()[name] == slots[1 + job], (name, slots)
        assert env.allocated(name) == [f"gpu-{x}" for x in slots[1 + job][1].split(",")]
    assert env.held() == held and env.book.vacancies(KEY) == []


def test_a_workers_template_the_group_cannot_place_refuses_it() -> None:
    env = StagedDraEnv()
    env.templates.add(template("one", exactly(1)))
    env.templates.add(template("two", {"name": "gpus", "exactly": {
        "deviceClassName": CLASS, "allocationMode": "All"}}))
    env.launched()
    assert env.bound() == {} and env.held() == ALL_FREE
    (said,) = env.reasons(LAUNCHER, "PodGroupClaimRefused")
    assert said.startswith(f"pod group {NS}/jobset:staged:0: ResourceClaimTemplate {NS}/two "
                           f"of the members 1-2 of pod group {NS}/jobset:staged:0 not made "
                           f"yet: request 'gpus' has allocationMode All: "), said


def test_workers_sharing_a_named_claim_are_refused_saying_why() -> None:
    env = StagedDraEnv(claim="shared-gpus")
    env.templates.add(template("one", exactly(1)))
    env.launched()
    assert env.bound() == {} and env.held() == ALL_FREE
    (said,) = env.reasons(LAUNCHER, "PodGroupClaimRefused")
    assert f"claim 'gpus' names ResourceClaim {NS}/shared-gpus, a claim shared by the " \
           f"pods that name it: it cannot be allocated to each member's own devices" in said


def test_a_slot_in_no_dra_mode_is_read_as_its_template_asks() -> None:
    """A template naming no claim, or asking nvidia.com/gpu, is not read from claims."""
    none = lambda ns, name: None  # noqa: E731
    assert read_slot({"containers": [{"name": "c"}]}, NS, none, CLASS, "w") is None
    gpu = copy.deepcopy(dra_spec("two"))
    gpu["containers"][0]["resources"]["limits"] = {"nvidia.com/gpu": "2"}
    assert read_slot(gpu, NS, none, CLASS, "w") is None
    got = read_slot(dra_spec("two"), NS, lambda ns, name: template(name, exactly(3)),
                    CLASS, "w")
    assert got is not None and (got.gpus, got.waiting, got.refused) == (3, "", "")
