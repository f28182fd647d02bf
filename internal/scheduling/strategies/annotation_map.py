"""annotationMap: exact nodes and devices from spec.schedulingMap or the
gpu-scheduling-map annotation (the seed's format, see mapparser.py). Checks that
each named node is Ready and each device exists, is healthy and is not held by
another workload; replicas of the same workload may share a device. Taints,
cordons and nodeSelector are not applied: the map is an explicit override, like
spec.nodeName."""

from __future__ import annotations

from internal.scheduling.strategies.base import Strategy, register


@register
class AnnotationMap(Strategy):
    name = "annotationMap"
    uses_map = True
