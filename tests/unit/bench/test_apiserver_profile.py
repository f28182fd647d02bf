"""The kube-apiserver profile's summary: each stage's share read from pprof's
cumulative listing, the largest match only (a stage's functions nest)."""

from __future__ import annotations

from bench.apiserver_profile import STAGES, stages

ROWS = [
    (56.9, "k8s.io/apiserver/pkg/endpoints/handlers/finisher.finishRequest.func1"),
    (14.9, "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel.(*Validator).Validate"),
    (14.9, "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel.(*Validator).validate"),
    (9.9, "k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/model.(*Structural).Properties"),
    (14.3, "k8s.io/apiserver/pkg/endpoints/handlers.(*patcher).applyPatch"),
    (6.0, "k8s.io/apimachinery/pkg/util/managedfields/internal.(*FieldManager).Update"),
    (15.0, "runtime.gcBgMarkWorker"),
    (15.0, "runtime.gcBgMarkWorker.func2"),
]


def test_each_stage_takes_its_own_function_and_not_a_nested_one() -> None:
    shares = dict(stages(ROWS))
    assert shares["CRD rules (CEL, x-kubernetes-validations)"] == 14.9
    assert shares["  of which: the spec's property table rebuilt per field read"] == 9.9
    assert shares["patch applied to the stored object (JSON encode, patch, decode)"] == 14.3
    assert shares["managed fields"] == 6.0
    assert shares["garbage collection (background marking)"] == 15.0
    assert shares["admission policies (ValidatingAdmissionPolicy, CEL)"] == 0.0


def test_no_stage_matches_the_request_as_a_whole() -> None:
    """A stage that matched the handler chain would read as most of the CPU."""
    whole = [(100.0, fn) for _, fn in ROWS[:1]]
    assert all(share == 0.0 for _, share in stages(whole))
    assert len({label for label, _ in STAGES}) == len(STAGES)


def test_per_unit_turns_shares_into_ms_per_unit_once_per_row(monkeypatch, tmp_path) -> None:
    from bench import apiserver_profile

    monkeypatch.setattr(apiserver_profile, "top_cum", lambda path: ROWS)
    monkeypatch.setattr(apiserver_profile, "total_samples_s", lambda path: 8.0)
    table = apiserver_profile.per_unit({"ours": (tmp_path / "a", 800),
                                        "theirs": (tmp_path / "b", 400)})
    rows = {line.split(" | ")[0][2:]: line.split(" | ")[1:] for line in table.splitlines()[2:]}
    assert rows["(all samples)"] == ["10.00", "20.00 |"]  # 8 s over 800 and over 400 units
    # 15% of 8 s over 800 units
    assert rows["garbage collection (background marking)"][0] == "1.50"
    assert len(rows) == len(table.splitlines()) - 2  # no row twice
    assert "deletes" not in rows  # nothing sampled there in either column


def test_the_answer_times_are_read_at_their_nearest_rank() -> None:
    """p50 and p99 of a create's answer, as the round-8 table prints them."""
    from bench.apiserver_profile import percentile

    times = [i / 1000 for i in range(1, 101)]  # 1..100 ms, shuffled order does not matter
    assert percentile(list(reversed(times)), 0.5) == 0.050
    assert percentile(times, 0.99) == 0.099
    assert percentile([0.2], 0.99) == 0.2
    assert percentile([], 0.5) == 0.0
