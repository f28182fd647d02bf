"""Our own writes coming back through the informers wake no reconcile (an event
predicate, as controller-runtime's predicates filter a controller's watches).

A placing reconcile creates its children and writes its status; the informers then
tell of each child's create and of the status write, and each woke the workload's
reconcile, which found nothing to do (3 of a unit's 5 reconciles in the benchmark's
burst, bench/README.md round 10). Dropped, per ``OwnWrites``:

- the add of a child we created, exactly as its create answered
  (``created_echo``: the same resourceVersion; a child changed since, by its
  kubelet or anyone, is let through); or, when the watch brings it before the
  create's answer is taken in (``on_its_way``), showing nothing the owner's
  reconcile reads (``owner_reads``) other than the manifest we sent;
- the update that is our own last write of the workload landing and changes only
  its status (``write_echo``: the resourceVersion our write landed at, nothing of
  ours still on its way, the spec and metadata unchanged; a write that raced
  another change, or a deletion, is let through), or only adds our finalizer
  while its patch is on its way (``finalizing``).

Any other event passes, and a reconcile that waits for something of its own asks to
be requeued (``requeue_after``); none waits for these echoes."""

from __future__ import annotations

from controllers.shared.child_news import owner_reads
from controllers.shared.own_writes import OwnWrites
from runtime.predicates import CreateEvent, Predicate, UpdateEvent


class OwnEchoes(Predicate):
    def __init__(self, own_writes: OwnWrites) -> None:
        self.own_writes = own_writes

    def create(self, e: CreateEvent) -> bool:
        if self.own_writes.created_echo(e.obj):
            return False
        sent = self.own_writes.on_its_way(e.obj)
        return sent is None or owner_reads(sent) != owner_reads(e.obj)

    def update(self, e: UpdateEvent) -> bool:
        return not self.own_writes.write_echo(e.old, e.new)
