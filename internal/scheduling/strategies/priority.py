"""priority: places like leastLoaded, and when nothing fits plans the preemption of
strictly lower-priority workloads (the lowest first, as few as needed). The caller
evicts the victims; they go back to Pending with a Preempted condition."""

from __future__ import annotations

from internal.scheduling.strategies.base import register
from internal.scheduling.strategies.least_loaded import LeastLoaded


@register
class Priority(LeastLoaded):
    name = "priority"
    preempts = True
