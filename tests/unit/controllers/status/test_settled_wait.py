"""A gang's status that ``StatusWriter.settle`` drops before a decision is written
again when the decision is the same.

A gang is committed by a synchronous write, so before it decides, the status
writer's pending write of it is dropped (``settle``). The reconcile started from
that dropped status (``OwnWrites.view``, the status we last asked for): a decision
that wants the same status again found it unchanged and wrote nothing, so the API
never showed it (a gang left without its ``Scheduled`` condition until a later
reconcile happened to come)."""

from __future__ import annotations

from typing import Any

from controllers.status.writer import StatusWriter
from tests.unit.controllers.fakes import NS, Env


class StatusClient:
    """The fake client, taking the status writer's JSON patch of a status (a UID
    test, then the status) as the merge patch it amounts to."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def patch(self, api_version: str, kind: str, name: str, body: Any, *,
              namespace: str | None = None, patch_type: str = "merge",
              subresource: str | None = None) -> dict[str, Any]:
        if patch_type == "json":
            body = {"status": next(op["value"] for op in body if op["path"] == "/status")}
        return self.client.patch(api_version, kind, name, body, namespace=namespace,
                                 patch_type="merge", subresource=subresource)

    def get(self, *args: Any, **kw: Any) -> dict[str, Any]:
        return self.client.get(*args, **kw)


def test_a_gangs_status_dropped_by_settle_is_written_when_decided_again() -> None:
    env = Env(nodes=1, gpus=4)
    writer = StatusWriter(StatusClient(env.client), env.workloads, own_writes=env.own_writes)
    env.rec = env.new_reconciler(status_writer=writer)
    env.workload("g", replicas=2, gpusPerReplica=4)  # 8 GPUs: nothing fits
    first = env.reconcile("g")
    assert first is not None and first.requeue_after > 1  # the retry policy's timer
    assert writer.queued() == 1  # Unschedulable, on its way (no writer thread yet)
    env.reconcile("g")  # woken before the write went out: the same decision
    writer.start()
    try:
        assert writer.flush(5.0)
    finally:
        writer.stop()
    assert env.condition("g", "Scheduled")["reason"] == "Unschedulable"
    assert env.decisions == 2 and env.state.booking(f"{NS}/g") is None
