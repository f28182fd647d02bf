"""The NVML agent: reads the GPUs of its node (behind :mod:`internal.agent.nvml`) and
keeps the node's GPUNode status, node labels and Prometheus metrics current.

Scheduler-side helpers that need no agent running (staleness, the allocatable
fallback) live in :mod:`internal.scheduling.inventory`, which is pure.
"""
