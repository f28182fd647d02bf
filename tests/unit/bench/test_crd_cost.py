"""bench.crd_cost --creates: what it swaps per revision, and the allocation count it
reads from the kube-apiserver's /metrics."""

from __future__ import annotations

from bench import crd_cost


def test_a_revision_brings_every_admission_object_a_create_meets() -> None:
    """The finalizer policy and workload-priority-class are swapped with the revision
    (before, they stayed as installed, so a change to them measured nothing)."""
    names = {(d["kind"], d["metadata"]["name"]) for d in crd_cost.policies_at("HEAD")}
    assert names == {
        ("ValidatingAdmissionPolicy", "gpuworkload-scheduling-map.gpu.orchestrator.dev"),
        ("ValidatingAdmissionPolicyBinding", "gpuworkload-scheduling-map.gpu.orchestrator.dev"),
        ("ValidatingAdmissionPolicy", "workload-priority-class.gpu.orchestrator.dev"),
        ("ValidatingAdmissionPolicyBinding", "workload-priority-class.gpu.orchestrator.dev"),
        ("MutatingAdmissionPolicy", "gpuworkload-children-finalizer"),
        ("MutatingAdmissionPolicyBinding", "gpuworkload-children-finalizer"),
    }
    assert crd_cost._path("MutatingAdmissionPolicy", "admissionregistration.k8s.io/v1beta1",
                          "x") == ("/apis/admissionregistration.k8s.io/v1beta1/"
                                   "mutatingadmissionpolicies/x")


class _Api:
    def text(self, path: str) -> str:
        assert path == "/metrics"
        return ("# HELP go_memstats_mallocs_total Total number of mallocs.\n"
                "go_memstats_mallocs_total 1.2345e+06\n"
                "go_memstats_alloc_bytes_total 9.8e+08\n"
                "go_memstats_alloc_bytes 1.1e+07\n"
                'apiserver_watch_cache_initializations_total{group="gpu.orchestrator.dev",'
                'resource="gpuworkloads"} 3\n'
                'apiserver_watch_cache_initializations_total{group="",resource="pods"} 1\n')


def test_the_allocation_counters_and_the_watch_cache_rebuilds_are_read() -> None:
    assert crd_cost._allocs(_Api()) == (1.2345e6, 9.8e8)
    assert crd_cost._cache_inits(_Api()) == 3
