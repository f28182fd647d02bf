"""A pod group member in dra mode (controllers/podbinding/memberclaims.py): how many
GPUs its claims ask, when its group waits for them, which claims refuse it, and the
allocation written before its Binding, as kube-scheduler's DRA plugin writes it."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from api.v1alpha1.keys import GROUP_CLAIM_ANNOTATION
from api.v1alpha1.types import DeviceExposure
from controllers.placement.source import PlacementStateSource
from controllers.placement.state import PlacementState
from controllers.podbinding.controller import PodBindingOptions, PodBindingReconciler
from controllers.podbinding.memberclaims import (
    DELETE_PROTECTION,
    DRA_OFF,
    MemberClaimsReader,
    member_gpus,
    planned,
    read_member,
)
from controllers.podbinding.seedbook import SeedBook
from internal.scheduling.resourceslices import claim_owner
from runtime.store import Indexer
from tests.unit.controllers.podbinding.fixtures import GroupEnv, member
from tests.unit.controllers.podbinding.test_podbinding import NS as GNS
from tests.unit.controllers.podbinding.test_podbinding import FakeClient
from tests.unit.scheduling.helpers import dra_slice

CLASS = "gpu.nvidia.com"
NS = "ml"
HOLDER = f"PodGroup:{NS}/jobset:train:0"


def pod(claims: list[dict[str, Any]] | None = None, made: dict[str, str] | None = None,
        mode: str | None = None, gpus: int = 0) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "trainer", "image": "t"}
    if gpus:
        c["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    p: dict[str, Any] = {
        "metadata": {"name": "train-0", "namespace": NS, "uid": "pod-uid",
                     "annotations": {"gpu.orchestrator.dev/device-exposure": mode}
                     if mode else {}},
        "spec": {"containers": [c]}}
    if claims is not None:
        p["spec"]["resourceClaims"] = claims
    if made is not None:
        p["status"] = {"resourceClaimStatuses": [{"name": k, "resourceClaimName": v}
                                                 for k, v in made.items()]}
    return p


TEMPLATE = [{"name": "gpus", "resourceClaimTemplateName": "two"}]


def claim(*requests: dict[str, Any], name: str = "train-0-gpus-x", **status: Any
          ) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": NS, "uid": "claim-uid",
                         "resourceVersion": "7",
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod",
                                              "name": "train-0", "uid": "pod-uid",
                                              "controller": True}]},
            "spec": {"devices": {"requests": list(requests)}}, "status": status}


def exactly(count: int = 2, name: str = "gpus", **more: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": CLASS, "count": count, **more}}


def lookup(*claims: dict[str, Any]) -> Any:
    by = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    return lambda ns, name: by.get((ns, name))


def test_a_members_claims_ask_the_sum_of_their_exact_counts() -> None:
    c = claim(exactly(2), exactly(1, name="more", allocationMode="ExactCount"))
    got = read_member(pod(TEMPLATE, {"gpus": "train-0-gpus-x"}), lookup(c), CLASS)
    assert (got.gpus, got.waiting, got.refused) == (3, "", "")
    assert got.asks[0].requests == (("gpus", 2), ("more", 1))
    # the plan reads that count; any other pod's is its nvidia.com/gpu request
    assert member_gpus(planned(pod(TEMPLATE), got.gpus)) == 3
    assert member_gpus(pod(gpus=4)) == 4


def test_a_member_whose_claim_is_not_made_yet_waits() -> None:
    assert "claim 'gpus' is not made yet" in read_member(pod(TEMPLATE), lookup(), CLASS).waiting
    # named by kube-controller-manager, not in the cache yet: the same
    got = read_member(pod(TEMPLATE, {"gpus": "train-0-gpus-x"}), lookup(), CLASS)
    assert got.waiting and not got.refused


@pytest.mark.parametrize("request_, says", [
    ({"name": "gpus", "exactly": {"deviceClassName": CLASS, "allocationMode": "All"}},
     "request 'gpus' has allocationMode All"),
    ({"name": "gpus", "exactly": {"deviceClassName": "other.example.com", "count": 1}},
     "request 'gpus' asks device class 'other.example.com'"),
    (exactly(2, selectors=[{"cel": {"expression": "true"}}]), "request 'gpus' has selectors"),
    ({"name": "gpus", "firstAvailable": [{"name": "a", "deviceClassName": CLASS}]},
     "request 'gpus' is not 'exactly' (firstAvailable)"),
])
def test_a_claim_the_group_cannot_place_is_refused_in_words(request_: dict, says: str
                                                            ) -> None:
    c = claim(request_)
    got = read_member(pod(TEMPLATE, {"gpus": c["metadata"]["name"]}), lookup(c), CLASS)
    assert got.refused.startswith(f"ResourceClaim {NS}/train-0-gpus-x of pod {NS}/train-0: "
                                  f"{says}: "), got.refused
    assert "asks exactly N devices of device class 'gpu.nvidia.com'" in got.refused


def test_a_claim_of_mixed_classes_is_refused() -> None:
    other = {"name": "nic", "exactly": {"deviceClassName": "nic.example.com", "count": 1}}
    c = claim(exactly(2), other)
    got = read_member(pod(TEMPLATE, {"gpus": c["metadata"]["name"]}), lookup(c), CLASS)
    assert "request 'nic' asks device class 'nic.example.com'" in got.refused


def test_a_claim_reserved_for_another_pod_is_refused() -> None:
    c = claim(exactly(2), reservedFor=[{"resource": "pods", "name": "x", "uid": "x-uid"}])
    got = read_member(pod([{"name": "gpus", "resourceClaimName": c["metadata"]["name"]}]),
                      lookup(c), CLASS)
    assert "it is reserved for pods x" in got.refused


def test_only_a_member_naming_a_claim_in_no_other_mode_is_in_dra_mode() -> None:
    reader = MemberClaimsReader()
    assert reader.read(pod()) is None
    assert reader.read(pod(TEMPLATE, mode="cuda-visible-devices")) is None
    # DRA off: refused, not placed as a counted pod
    assert reader.read(pod(TEMPLATE)).refused == DRA_OFF  # type: ignore[union-attr]
    assert reader.read(pod(TEMPLATE, mode="dra")).refused == DRA_OFF  # type: ignore[union-attr]


class Client:
    """Applies a claim's patch and status updates as the API server would."""

    def __init__(self, c: dict[str, Any]) -> None:
        self.claim = copy.deepcopy(c)
        self.writes: list[str] = []

    def patch(self, api: str, kind: str, name: str, body: dict[str, Any],
              namespace: str) -> dict[str, Any]:
        self.writes.append("metadata")
        meta = self.claim["metadata"]
        assert body["metadata"]["resourceVersion"] == meta["resourceVersion"]
        meta["finalizers"] = body["metadata"]["finalizers"]
        meta.setdefault("annotations", {}).update(body["metadata"]["annotations"])
        return copy.deepcopy(self.claim)

    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        self.writes.append("status")
        self.claim["status"] = {k: v for k, v in obj["status"].items() if v is not None}
        return copy.deepcopy(self.claim)


def results(node: str, devices: list[int], request: str) -> list[dict[str, Any]]:
    return [{"request": request, "driver": CLASS, "pool": node, "device": f"gpu-{d}"}
            for d in devices]


def test_a_claim_is_allocated_to_exactly_the_planned_devices_and_reserved() -> None:
    c = claim(exactly(2))
    client = Client(c)
    reader = MemberClaimsReader(client, None, CLASS, CLASS)
    reader.read = lambda p: read_member(p, lookup(c), CLASS)  # type: ignore[method-assign]
    member = pod(TEMPLATE, {"gpus": c["metadata"]["name"]})
    assert reader.allocate(member, "node1", [1, 3], HOLDER, results) == ""
    got = client.claim
    assert got["status"]["allocation"]["devices"]["results"] == results("node1", [1, 3], "gpus")
    assert got["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"][0][
        "matchFields"][0]["values"] == ["node1"]
    assert got["status"]["reservedFor"] == [{"resource": "pods", "name": "train-0",
                                             "uid": "pod-uid"}]
    assert got["metadata"]["finalizers"] == [DELETE_PROTECTION]
    assert got["metadata"]["annotations"][GROUP_CLAIM_ANNOTATION] == HOLDER
    # the ledger holds it as its group's, not as a conflict with the group's booking
    assert claim_owner(got) == HOLDER
    assert client.writes == ["metadata", "status"]


def test_unpublished_devices_are_not_allocated_and_say_so() -> None:
    c = claim(exactly(2))
    reader = MemberClaimsReader(Client(c), None, CLASS, CLASS)
    reader.read = lambda p: read_member(p, lookup(c), CLASS)  # type: ignore[method-assign]
    why = reader.allocate(pod(TEMPLATE, {"gpus": c["metadata"]["name"]}), "node1", [1, 3],
                          HOLDER, lambda node, devices, request: None)
    assert why == f"node1: device(s) 1,3 are not in the ResourceSlices of {CLASS}"


def test_a_group_key_names_a_claims_owner_only_in_its_own_namespace() -> None:
    c = claim(exactly(2))
    c["metadata"]["annotations"] = {GROUP_CLAIM_ANNOTATION: "PodGroup:other/label:x"}
    assert claim_owner(c) == "claim:claim-uid"
    c["metadata"]["annotations"] = {GROUP_CLAIM_ANNOTATION: HOLDER}
    del c["metadata"]["ownerReferences"]  # a claim no pod controls: its own
    assert claim_owner(c) == "claim:claim-uid"


# ------------------------------------------- the pod binding, on slices of 2 nodes


class DraClient(FakeClient):
    """The fake API of the pod binding's tests, with the claims' writes applied to
    ``claims`` (the manager's cache sees them at once)."""

    def __init__(self, claims: Indexer) -> None:
        super().__init__()
        self.claims = claims

    def patch(self, api: str, kind: str, name: str, body: dict[str, Any],
              namespace: str) -> dict[str, Any]:
        have = copy.deepcopy(dict(self.claims.get_by_name(name, namespace)))
        have["metadata"]["finalizers"] = body["metadata"]["finalizers"]
        have["metadata"].setdefault("annotations", {}).update(body["metadata"]["annotations"])
        return dict(self.claims.add(have))

    def update_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = {**obj, "status": {k: v for k, v in obj["status"].items() if v is not None}}
        return dict(self.claims.add(obj))


class DraEnv(GroupEnv):
    """node1..node4 of 4 GPUs; the DRA driver publishes node3's and node4's."""

    def __init__(self) -> None:
        self.claims = Indexer()
        #: (reason, message) of each problem the placement state reported
        self.problems: list[tuple[str, str]] = []
        super().__init__()
        self.client = DraClient(self.claims)
        self.book = SeedBook()
        self.states = PlacementStateSource(
            lambda books: PlacementState(
                DeviceExposure.CUDA_VISIBLE_DEVICES, pod_books=books, dra_driver=CLASS,
                on_problem=lambda obj, reason, why: self.problems.append((reason, why))),
            lambda state: state.rebuild(
                lambda: (self.nodes, [], [], self.pods.list()),
                lambda: ([dra_slice("node3", 4), dra_slice("node4", 4)], self.claims.list())))
        self.states.add_pod_book(self.book)
        self.rec = self.reconciler()

    def reconciler(self, options: PodBindingOptions | None = None) -> PodBindingReconciler:
        rec = super().reconciler(options)
        rec.groups.claims = MemberClaimsReader(self.client, self.claims, CLASS, CLASS)
        return rec

    def made(self, name: str, *requests: dict[str, Any]) -> None:
        """kube-controller-manager made pod ``name``'s claim from its template."""
        p = copy.deepcopy(dict(self.pods.get_by_name(name, GNS)))
        p["status"] = {**p.get("status", {}), "resourceClaimStatuses": [
            {"name": "gpus", "resourceClaimName": f"{name}-gpus"}]}
        self.pods.add(p)
        c = claim(*(requests or (exactly(3),)), name=f"{name}-gpus")
        c["metadata"].update(namespace=GNS, uid=f"claim-{name}")
        c["metadata"]["ownerReferences"][0].update(name=name, uid=p["metadata"]["uid"])
        self.claims.add(c)


def dra_group_member(i: int) -> dict[str, Any]:
    p = member("train", i, size=2)
    p["metadata"]["uid"] = f"uid-train-{i}"
    p["metadata"]["annotations"]["gpu.orchestrator.dev/device-exposure"] = "dra"
    p["spec"]["containers"][0]["resources"] = {"claims": [{"name": "gpus"}]}
    p["spec"]["resourceClaims"] = TEMPLATE
    return p


def test_a_dra_group_waits_for_its_claims_then_goes_to_sliced_nodes_with_them() -> None:
    env = DraEnv()
    for i in range(2):
        env.add(dra_group_member(i))
    env.made("train-0")
    for i in range(2):
        env.reconcile(f"train-{i}")
    # train-1's claim is not made yet: nothing is held, and it says why
    assert env.bound() == {} and not any(env.held().values())
    assert "waiting for the ResourceClaims of pod group" in \
        env.reasons("train-1", "WaitingForGroup")[0]
    env.made("train-1")
    env.reconcile("train-1")
    for name in list(env.enqueued):
        env.reconcile(name)
    bound = env.bound()
    assert sorted(bound) == ["train-0", "train-1"]
    # 3 devices each (their claims' count, no nvidia.com/gpu), only where the driver
    # publishes GPUs
    assert all(node in ("node3", "node4") and len(devs.split(",")) == 3
               for node, devs in bound.values()), bound
    for name, (_, devs) in bound.items():
        c = env.claims.get_by_name(f"{name}-gpus", GNS)
        assert [r["device"] for r in c["status"]["allocation"]["devices"]["results"]] == \
            [f"gpu-{d}" for d in devs.split(",")]
        assert c["status"]["reservedFor"][0]["name"] == name
        # the claim is held as its member's group's: no conflict once the cache shows it
        env.state.events.on_claim(c)
    assert env.problems == []
    # a claim of nobody's group on the same devices still is one
    foreign = copy.deepcopy(dict(c))
    foreign["metadata"].update(name="theirs", uid="their-uid", annotations={})
    env.state.events.on_claim(foreign)
    assert env.problems and {r for r, _ in env.problems} == {"DeviceConflict"}, env.problems


def test_a_dra_group_whose_claim_asks_all_devices_is_refused_and_holds_nothing() -> None:
    env = DraEnv()
    for i in range(2):
        env.add(dra_group_member(i))
        env.made(f"train-{i}", {"name": "gpus", "exactly": {
            "deviceClassName": CLASS, "allocationMode": "All"}})
    for i in range(2):
        env.reconcile(f"train-{i}")
    assert env.bound() == {} and not any(env.held().values())
    # each member is told, naming the first member's claim (by name) for both
    for i in range(2):
        (said,) = env.reasons(f"train-{i}", "PodGroupClaimRefused")
        assert said.startswith(f"pod group {GNS}/label:train: ResourceClaim "
                               f"{GNS}/train-0-gpus of pod {GNS}/train-0: request 'gpus' "
                               f"has allocationMode All"), said
