"""Node fit: what the kubelet re-checks at admission (nodefit.py, nodeusage.py) and
its use by the filters of every strategy."""

from __future__ import annotations

from typing import Any

import pytest

from internal.scheduling import UNSCHEDULABLE, schedule
from internal.scheduling.ledger import booking_owner
from internal.scheduling.nodefit import (
    PodFit,
    fit_reason,
    host_ports,
    pod_requests,
    port_clash,
    term_matches,
)
from internal.scheduling.nodeusage import NodeUsage, node_allocatable
from tests.unit.scheduling.helpers import cluster, foreign_pod, gpunode, node, workload


def sized(name: str, cpu: str = "16", memory: str = "64Gi", pods: str = "110",
          gpus: int = 4, **kw: Any) -> dict[str, Any]:
    n = node(name, gpus, **kw)
    n["status"]["allocatable"].update({"cpu": cpu, "memory": memory, "pods": pods})
    return n


def ctr(cpu: str | None = None, memory: str | None = None, *, limits: bool = False,
        ports: list[dict[str, Any]] | None = None, **extra: Any) -> dict[str, Any]:
    res = {k: v for k, v in (("cpu", cpu), ("memory", memory)) if v is not None}
    out: dict[str, Any] = {"name": "c", "resources": {"limits" if limits else "requests": res},
                           **extra}
    if ports:
        out["ports"] = ports
    return out


def pod(uid: str, node_name: str, *containers: dict[str, Any], phase: str = "Running",
        **spec: Any) -> dict[str, Any]:
    return {"metadata": {"uid": uid, "name": uid, "namespace": "ns"},
            "spec": {"nodeName": node_name, "containers": list(containers), **spec},
            "status": {"phase": phase}}


# ------------------------------------------------------------- requests


def test_requests_sum_containers_and_take_limits_where_no_request() -> None:
    spec = {"containers": [ctr("500m", "1Gi"), ctr("2", limits=True)]}
    assert pod_requests(spec) == {"cpu": 2500, "memory": 1 << 30}


def test_an_init_container_larger_than_the_containers_sets_the_request() -> None:
    spec = {"containers": [ctr("1"), ctr("1")], "initContainers": [ctr("3", "1Mi")],
            "overhead": {"cpu": "250m"}}
    # max(sum 2, init 3) + overhead
    assert pod_requests(spec) == {"cpu": 3250, "memory": 1 << 20}


def test_a_sidecar_runs_beside_the_containers_and_the_later_inits() -> None:
    spec = {"containers": [ctr("1")],
            "initContainers": [ctr("1", restartPolicy="Always"), ctr("2")]}
    # containers 1 + sidecar 1 = 2; the later init 2 + sidecar 1 = 3
    assert pod_requests(spec) == {"cpu": 3000}


def test_gpus_are_counted_as_the_kubelet_counts_them() -> None:
    c = {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "2", "example.com/nic": "1"}}}
    assert pod_requests({"containers": [c]}) == {"nvidia.com/gpu": 2, "example.com/nic": 1}


# ------------------------------------------------------------------ ports


def test_host_ports_clash_on_the_same_port_and_protocol_unless_both_ips_differ() -> None:
    a = host_ports({"containers": [ctr(ports=[{"containerPort": 80, "hostPort": 8080}])]})
    assert a == {("TCP", "", 8080)}
    assert port_clash(a, [("TCP", "10.0.0.1", 8080)]) is not None
    assert port_clash(a, [("UDP", "", 8080)]) is None
    assert port_clash({("TCP", "10.0.0.1", 1)}, [("TCP", "10.0.0.2", 1)]) is None
    assert host_ports({"hostNetwork": True,
                       "containers": [ctr(ports=[{"containerPort": 9000}])]}) == {
        ("TCP", "", 9000)}


# -------------------------------------------------------------- affinity


@pytest.mark.parametrize(
    ("expr", "ok"),
    [
        ({"key": "zone", "operator": "In", "values": ["a", "b"]}, True),
        ({"key": "zone", "operator": "NotIn", "values": ["a"]}, False),
        ({"key": "zone", "operator": "Exists"}, True),
        ({"key": "gone", "operator": "DoesNotExist"}, True),
        ({"key": "cores", "operator": "Gt", "values": ["15"]}, True),
        ({"key": "cores", "operator": "Lt", "values": ["16"]}, False),
        ({"key": "zone", "operator": "Gt", "values": ["1"]}, False),  # not a number
    ],
)
def test_match_expressions_read_like_kubernetes(expr: dict[str, Any], ok: bool) -> None:
    labels = {"zone": "a", "cores": "16"}
    assert term_matches({"matchExpressions": [expr]}, labels, "n1") is ok


def test_match_fields_name_the_node_and_an_empty_term_matches_nothing() -> None:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}
    assert term_matches(term, {}, "n1")
    assert not term_matches(term, {}, "n2")
    assert not term_matches({}, {}, "n1")


# -------------------------------------------------------------------- fit


def test_fit_names_what_is_short_in_kube_schedulers_words() -> None:
    fit = PodFit.of({"containers": [ctr("8", "4Gi")]})
    alloc = {"cpu": 16000, "memory": 64 << 30, "pods": 110}
    assert fit_reason(alloc, {"cpu": 14000}, 3, (), fit) == "2 CPU free, needs 8"
    assert fit_reason(alloc, {"memory": 62 << 30}, 3, (), fit) == \
        "2Gi memory free, needs 4Gi"
    assert fit_reason(alloc, {}, 110, (), fit) == "too many pods (110 of 110)"
    assert fit_reason(alloc, {}, 3, (), fit) is None
    # a node that does not say its CPU is not checked for it; an extended resource is 0
    assert fit_reason({}, {}, 0, (), fit) is None
    nic = PodFit.of({"containers": [{"name": "c", "resources": {
        "requests": {"example.com/nic": "1"}}}]})
    assert fit_reason({}, {}, 0, (), nic) == "0 example.com/nic free, needs 1"


def test_usage_follows_pod_events_and_ignores_finished_and_unbound_pods() -> None:
    u = NodeUsage([pod("a", "n1", ctr("2")), pod("b", "n1", ctr("1"), phase="Succeeded"),
                   pod("c", "", ctr("5"))])
    assert u.on("n1").requests == {"cpu": 2000} and u.pods_on("n1") == 1
    u.set_pod(pod("a", "n1", ctr("2")))  # seen again: nothing changes
    u.set_pod(pod("d", "n1", ctr("500m", ports=[{"containerPort": 1, "hostPort": 80}])))
    assert u.on("n1").requests == {"cpu": 2500} and list(u.on("n1").ports) == [("TCP", "", 80)]
    u.set_pod(pod("a", "n1", ctr("2"), phase="Failed"))
    u.remove_pod("d")
    assert u.on("n1").requests == {} and u.pods_on("n1") == 0 and not u.on("n1").ports


def test_node_allocatable_in_fit_units() -> None:
    assert node_allocatable(sized("n", cpu="15500m")) == {
        "cpu": 15500, "memory": 64 << 30, "pods": 110, "nvidia.com/gpu": 4}
    # listed at 0 (a device plugin ran there) is not the same as not listed
    assert node_allocatable(sized("n", gpus=0))["nvidia.com/gpu"] == 0
    assert "nvidia.com/gpu" not in node_allocatable({"status": {"allocatable": {"cpu": "1"}}})


# ------------------------------------------------------- nvidia.com/gpu


def gpu_ctr(n: int, cpu: str | None = None) -> dict[str, Any]:
    c = ctr(cpu)
    c["resources"]["limits"] = {"nvidia.com/gpu": str(n)}
    return c


LISTED_0 = ("node lists nvidia.com/gpu: 0 (a device plugin ran there); the kubelet "
            "would refuse the pod (OutOfnvidia.com/gpu)")


def test_a_gpu_request_is_checked_as_the_kubelet_admits_it() -> None:
    fit = PodFit.of({"containers": [gpu_ctr(4)]})
    # listed at 0: the kubelet refuses the pod (OutOfnvidia.com/gpu)
    assert fit_reason({"nvidia.com/gpu": 0}, {}, 0, (), fit) == LISTED_0
    # not listed: the kubelet drops the request (removeMissingExtendedResources)
    assert fit_reason({"cpu": 16000}, {}, 0, (), fit) is None
    # listed with room, and with too little left
    assert fit_reason({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 4}, 1, (), fit) is None
    assert fit_reason({"nvidia.com/gpu": 8}, {"nvidia.com/gpu": 6}, 1, (), fit) == (
        "node lists nvidia.com/gpu: 2 of 8 left, needs 4; the kubelet would refuse "
        "the pod (OutOfnvidia.com/gpu)")
    # another extended resource keeps kube-scheduler's rule: not listed is 0
    nic = PodFit.of({"containers": [{"name": "c", "resources": {
        "limits": {"example.com/nic": "1"}}}]})
    assert fit_reason({"cpu": 16000}, {}, 0, (), nic) == "0 example.com/nic free, needs 1"


def test_the_gpus_of_every_pod_on_the_node_are_summed() -> None:
    u = NodeUsage([pod("a", "n1", gpu_ctr(3)), pod("b", "n1", gpu_ctr(2), ctr("1")),
                   pod("c", "n1", gpu_ctr(8), phase="Succeeded"), pod("d", "n2", gpu_ctr(8))])
    assert u.on("n1").requests == {"nvidia.com/gpu": 5, "cpu": 1000}
    alloc = node_allocatable(sized("n1", gpus=8))
    fit = PodFit.of({"containers": [gpu_ctr(2)]})
    assert u.refusal("n1", alloc, fit, 0, None) is None
    # beside one more of this decision's own: 5 + 2 + 2 > 8
    assert u.refusal("n1", alloc, fit, 1, None) == (
        "node lists nvidia.com/gpu: 1 of 8 left, needs 2; the kubelet would refuse "
        "the pod (OutOfnvidia.com/gpu)")
    assert u.room("n1", alloc, fit, None) == (1, "3 nvidia.com/gpu free")
    u.remove_pod("a")
    assert u.refusal("n1", alloc, fit, 1, None) is None


def test_a_preemptions_victim_group_takes_its_members_requests_with_it() -> None:
    """A pod group's members name no workload (their owner, by their own reading, is
    themselves), and the ledger holds them by their group's booking: a preemption
    plan releasing that booking's owner takes their GPUs and CPU off the node too."""
    from api.v1alpha1.types import Placement
    from internal.scheduling.ledger import Ledger

    def member(uid: str, devices: str) -> dict[str, Any]:
        p = pod(uid, "n1", gpu_ctr(2, cpu="1"))
        p["metadata"]["annotations"] = {"gpu.orchestrator.dev/devices": devices}
        return p

    ledger = Ledger()
    ledger.set_node_devices("n1", range(4))
    ledger.assume("Pod:ns/group", [Placement(index=0, node="n1", devices=[0, 1]),
                                   Placement(index=1, node="n1", devices=[2, 3])],
                  gpus_per_replica=2, owner="uid-group#0", check_capacity=False)
    u = NodeUsage([member("m0", "0,1"), member("m1", "2,3"), pod("other", "n1", ctr("1"))])
    alloc = node_allocatable(sized("n1", gpus=4))
    fit = PodFit.of({"containers": [gpu_ctr(2, cpu="1")]})
    assert u.on("n1", ledger).requests == {"nvidia.com/gpu": 4, "cpu": 3000}
    assert u.refusal("n1", alloc, fit, 0, ledger) is not None  # the group holds it all
    released = frozenset({"uid-group#0"})
    left = u.on("n1", ledger, released).requests
    assert {r: n for r, n in left.items() if n} == {"cpu": 1000}  # the other pod's
    assert u.refusal("n1", alloc, fit, 1, ledger, released) is None
    assert u.on("n1", ledger, frozenset({"someone-else#0"})).requests == {
        "nvidia.com/gpu": 4, "cpu": 3000}


def test_a_pod_asking_gpus_goes_where_the_kubelet_would_admit_it() -> None:
    # node1 has a GPUNode of 4 devices but lists nvidia.com/gpu at 0 (a device
    # plugin ran there before): the GPU filters would pass it, the kubelet would not.
    # A pod bound with named devices keeps its request (the pod binding's model of a
    # seed pod or a group member: named devices, the pod's spec as the template)
    spec = {"containers": [gpu_ctr(2, "1")]}
    snap, led = cluster(sized("node1", gpus=0), sized("node2", gpus=4),
                        gpunodes=(gpunode("node1", 4), gpunode("node2", 4)))
    w = workload(gpusPerReplica=2, deviceExposure="cuda-visible-devices",
                 template={"spec": spec})
    assert schedule(w, snap, led, "bestFit").nodes == ["node2"]
    snap, led = cluster(sized("node1", gpus=0), gpunodes=(gpunode("node1", 4),))
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons == {"node1": LISTED_0}
    assert LISTED_0 in d.message
    # a node that does not list nvidia.com/gpu at all: the kubelet admits the pod
    bare = sized("node1")
    del bare["status"]["allocatable"]["nvidia.com/gpu"]
    snap, led = cluster(bare, gpunodes=(gpunode("node1", 4),))
    assert schedule(w, snap, led).nodes == ["node1"]


def test_in_device_plugin_mode_what_the_gpus_allow_is_not_refused() -> None:
    # the node lists its 8 devices; a foreign pod asks 4 of them: two replicas of 2
    # fit beside it, a third does not (the GPU filters and node fit agree)
    snap, led = cluster(sized("node1", gpus=8))
    snap.usage.set_pod(pod("x", "node1", gpu_ctr(4)))
    foreign_pod(led, "x", "node1", 4)
    spec = {"containers": [gpu_ctr(2, "1")]}
    two = workload(gpusPerReplica=2, replicas=2, deviceExposure="device-plugin",
                   template={"spec": spec})
    assert [p.node for p in schedule(two, snap, led).placements] == ["node1", "node1"]
    three = workload(gpusPerReplica=2, replicas=3, deviceExposure="device-plugin",
                     template={"spec": spec})
    d = schedule(three, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons == {"node1": "4 free GPUs, room for 2 of 3 replicas"}
    # the template asks more than the replica's GPUs: its pods ask the replica's
    # (pod_template), so node fit does not refuse it for the template's count
    more = workload(gpusPerReplica=2, deviceExposure="device-plugin",
                    template={"spec": {"containers": [gpu_ctr(8, "1")]}})
    assert schedule(more, snap, led).nodes == ["node1"]


# --------------------------------------------------------- in the filters


def test_the_templates_node_selector_is_honoured() -> None:
    snap, led = cluster(sized("node1"), sized("node4", labels={"kubernetes.io/hostname": "node4"}))
    w = workload(gpusPerReplica=1, template={"spec": {
        "nodeSelector": {"kubernetes.io/hostname": "node4"}, "containers": [ctr("1")]}})
    assert schedule(w, snap, led).nodes == ["node4"]


def test_required_node_affinity_is_honoured_and_said() -> None:
    snap, led = cluster(sized("node1", labels={"zone": "a"}), sized("node2", labels={"zone": "b"}))
    aff = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": ["b"]}]}]}}}
    w = workload(gpusPerReplica=3, replicas=2, template={"spec": {"affinity": aff}})
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons["node1"] == "does not match the template's required node affinity"
    assert schedule(workload(gpusPerReplica=1, template={"spec": {"affinity": aff}}),
                    snap, led).nodes == ["node2"]


def test_a_replica_asking_more_cpu_than_any_node_has_waits_with_the_reason() -> None:
    snap, led = cluster(sized("node1"), sized("node2"))
    w = workload(gpusPerReplica=1, template={"spec": {"containers": [ctr("64")]}})
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons == {"node1": "16 CPU free, needs 64", "node2": "16 CPU free, needs 64"}
    assert "node1, node2: 16 CPU free, needs 64" in d.message


def test_the_nodes_pods_and_the_gangs_own_replicas_count() -> None:
    snap, led = cluster(sized("node1"), sized("node2"))
    snap.usage.set_pod(pod("x", "node1", ctr("10")))
    w = workload(gpusPerReplica=1, replicas=2, template={"spec": {"containers": [ctr("6")]}})
    d = schedule(w, snap, led, "bestFit")
    # node1 has 6 CPU left: one replica; the second goes to node2
    assert sorted(p.node for p in d.placements) == ["node1", "node2"]
    # 1 on node1, 2 on node2 (16 CPU): a fourth has no room
    four = workload(gpusPerReplica=1, replicas=4,
                    template={"spec": {"containers": [ctr("6")]}})
    assert schedule(four, snap, led).outcome == UNSCHEDULABLE


def test_a_host_port_is_never_shared_on_a_node() -> None:
    snap, led = cluster(sized("node1"), sized("node2"))
    port = [{"containerPort": 80, "hostPort": 8080}]
    snap.usage.set_pod(pod("x", "node1", ctr(ports=port)))
    w = workload(gpusPerReplica=1, replicas=2,
                 template={"spec": {"containers": [ctr(ports=port)]}})
    d = schedule(w, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons["node1"] == "host port 0.0.0.0:8080/TCP in use"
    one = workload(gpusPerReplica=1, template={"spec": {"containers": [ctr(ports=port)]}})
    assert schedule(one, snap, led).nodes == ["node2"]


def test_a_node_at_its_pod_limit_is_skipped() -> None:
    snap, led = cluster(sized("node1", pods="1"), sized("node2", pods="2"))
    snap.usage.set_pod(pod("x", "node1", ctr()))
    d = schedule(workload(gpusPerReplica=1), snap, led)
    assert d.nodes == ["node2"]


def test_a_booking_counts_before_its_pods_show_and_not_twice_after() -> None:
    snap, led = cluster(sized("node1"))
    fit_of = {"containers": [ctr("10")]}
    first = workload("a", gpusPerReplica=1, template={"spec": fit_of})
    first.metadata.uid = "ua"
    d = schedule(first, snap, led)
    d.assume(led, first)
    owner = booking_owner(first)
    snap.usage.reserve(first.key, owner, PodFit.of(fit_of), [p.node for p in d.placements])
    second = workload("b", gpusPerReplica=1, template={"spec": {"containers": [ctr("4")]}})
    big = workload("c", gpusPerReplica=1, template={"spec": {"containers": [ctr("8")]}})
    assert schedule(big, snap, led).reasons == {"node1": "6 CPU free, needs 8"}
    # its pod shows: counted once, as the pod
    child = pod("p-a", "node1", ctr("10"))
    child["metadata"]["ownerReferences"] = [
        {"kind": "GPUWorkload", "uid": "ua", "controller": True, "name": "a"}]
    snap.usage.set_pod(child)
    assert snap.usage.on("node1", led).requests == {"cpu": 10000}
    child["metadata"]["generation"] = 2  # resized: read again, still one pod
    snap.usage.set_pod(child)
    assert snap.usage.on("node1", led).requests == {"cpu": 10000}
    assert schedule(second, snap, led).ok
    # a booking released before its pods were made counts no more
    snap.usage.remove_pod("p-a")
    snap.usage.reserve(first.key, owner, PodFit.of(fit_of), ["node1"])
    assert snap.usage.on("node1", led).requests == {"cpu": 10000}
    led.forget(first.key)
    assert snap.usage.on("node1", led).requests == {}


def test_a_pod_read_again_takes_one_replica_off_its_booking_once() -> None:
    u = NodeUsage()
    u.reserve("ns/a", "ua#0", PodFit.of({"containers": [ctr("1")]}), ["n1", "n1"])
    assert u.on("n1").requests == {"cpu": 2000}
    child = pod("p0", "n1", ctr("1"))
    child["metadata"]["ownerReferences"] = [
        {"kind": "GPUWorkload", "uid": "ua", "controller": True, "name": "a"}]
    u.set_pod(child)
    assert u.on("n1").requests == {"cpu": 2000}  # one pod, one replica still to come
    child["metadata"]["generation"] = 2
    u.set_pod(child)
    assert u.on("n1").requests == {"cpu": 2000}


def test_a_gang_bounded_by_cpu_says_so_not_its_free_gpus() -> None:
    snap, led = cluster(sized("node1"), sized("node2"))
    gang = workload(gpusPerReplica=1, replicas=5, template={"spec": {"containers": [ctr("8")]}})
    d = schedule(gang, snap, led)
    assert d.outcome == UNSCHEDULABLE
    assert d.reasons == {"node1": "16 CPU free, room for 2 of 5 replicas",
                         "node2": "16 CPU free, room for 2 of 5 replicas"}
    ports = workload(gpusPerReplica=1, replicas=3, template={"spec": {"containers": [
        ctr(ports=[{"containerPort": 80, "hostPort": 80}])]}})
    assert schedule(ports, snap, led).reasons["node1"] == \
        "host port 0.0.0.0:80/TCP, room for 1 of 3 replicas"


def test_a_preemption_counts_its_victims_cpu_and_ports_as_freed() -> None:
    from internal.scheduling import PREEMPT
    snap, led = cluster(sized("node1", gpus=1))
    tmpl = {"spec": {"containers": [ctr("16", ports=[{"containerPort": 1, "hostPort": 80}])]}}
    low = workload("low", gpusPerReplica=1, priority=1, template=tmpl)
    low.metadata.uid = "ulow"
    d = schedule(low, snap, led)
    d.assume(led, low)
    child = pod("p-low", "node1", *tmpl["spec"]["containers"])
    child["metadata"]["ownerReferences"] = [
        {"kind": "GPUWorkload", "uid": "ulow", "controller": True, "name": "low"}]
    snap.usage.set_pod(child)
    high = workload("high", gpusPerReplica=1, priority=100, schedulingStrategy="priority",
                    template=tmpl)
    d = schedule(high, snap, led)
    assert d.outcome == PREEMPT and d.victims == ["default/low"]
