"""``kubectl gpu queues``' bar and row: used within the nominal quota, borrowed
above it, and unused nominal, as the queue's status says."""

from __future__ import annotations

from internal.cli.cmd_queues import bar, row


def test_the_bar_shows_own_borrowed_and_unused_quota() -> None:
    assert bar(8, 16) == "[##########++++++++++]"
    assert bar(8, 4) == "[##########..........]"
    assert bar(8, 8) == "[####################]"
    assert bar(0, 0) == "[                    ]"


def test_a_row_reads_the_queues_spec_and_status() -> None:
    q = {"metadata": {"name": "team-a"},
         "spec": {"nominalGPUs": 8, "cohort": "research"},
         "status": {"usedGPUs": 12.5, "borrowedGPUs": 4.5, "lentGPUs": 0,
                    "admittedWorkloads": 3, "pendingWorkloads": 2}}
    assert row(q)[:9] == ["team-a", "research", "8", "-", "12.5", "4.5", "0", 3, 2]
