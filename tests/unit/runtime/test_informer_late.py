"""An informer asked of a started factory is started at once (a kind served after the
manager started: a JobSet or LeaderWorkerSet installed later, docs/podgroups.md);
one asked before the start waits for it (no server)."""

from __future__ import annotations

import pytest

from runtime.informer import SharedIndexInformer, SharedInformerFactory


def test_an_informer_asked_for_after_the_start_is_started(
        monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[str] = []
    monkeypatch.setattr(SharedIndexInformer, "start",
                        lambda self: started.append(self.kind))
    factory = SharedInformerFactory(client=None)  # type: ignore[arg-type]
    factory.informer_for("v1", "Pod")
    assert started == []  # not before the factory starts
    factory.start()
    assert started == ["Pod"]
    factory.informer_for("jobset.x-k8s.io/v1alpha2", "JobSet")
    assert started == ["Pod", "JobSet"]
    factory.informer_for("v1", "Pod")  # the same one, asked again: not started twice
    factory.informer_for("v1", "Node", transform=lambda o: o)
    assert started == ["Pod", "JobSet", "Node"]
