"""What the pod-group test modules share, so that each module holds only its own test:

- the module's two fixtures: the real peer controllers it needs, running for the
  module (``peers``), and the manager with the pod binding, started once their
  kinds are served (``binder``): ``peers, binder = peer_fixtures(LWS)``;
- a JobSet's or a pod template's pods on the test's own nodes (``on_nodes``,
  ``pinned``), on named nodes (``named_nodes``);
- the members of a group as the API server has them (``members``, ``bound``,
  ``named``), their groups as the pod binding reads them (``groups_of``), what
  their Events say (``told``), what ``kubectl gpu nodes`` shows (``nodes_shown``),
  a leader's or a launcher's reserved slots (``slots_of``).

The peer controllers themselves and the objects they run are in controllers.py;
the webhook exposing the devices (``exposure``) and ``admin`` are conftest.py's
fixtures."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any

import pytest

from api.v1alpha1.keys import DEVICE_AUTHORITY_LABEL
from hack.testenv import ControlPlane
from internal.cli.main import main
from internal.scheduling.podgroups import PodGroup, pod_group
from runtime import Client, NotFound
from tests.integration.controller.conftest import NodeGroup, Running, events_for
from tests.integration.podgroups.controllers import Kind, PeerController, jobset
from tests.waiting import eventually

JSON = dict[str, Any]
#: the label the JobSet controller puts on every pod of a JobSet: its name
JOBSET_NAME = "jobset.sigs.k8s.io/jobset-name"
#: the label the LeaderWorkerSet controller puts on every pod of an LWS: its name
LWS_NAME = "leaderworkerset.sigs.k8s.io/name"


def peer_fixtures(*kinds: Kind) -> tuple[Callable[..., Any], Callable[..., Any]]:
    @pytest.fixture(scope="module")
    def peers(installed: ControlPlane) -> Iterator[None]:
        runs = [PeerController(installed, kind).start() for kind in kinds]
        yield
        for run in runs:
            run.stop()

    @pytest.fixture(scope="module")
    def binder(installed: ControlPlane, peers: None) -> Iterator[Running]:
        run = Running(installed, pod_binding=True).start()
        yield run
        run.stop()

    return peers, binder


def named_nodes(group: NodeGroup, count: int, gpus: int = 4) -> list[str]:
    """``count`` more nodes of ``gpus`` GPUs in ``group``, named (the ledger picks
    the devices there: a member asking nvidia.com/gpu gets exact devices)."""
    return group.add(count, gpus, labels={DEVICE_AUTHORITY_LABEL: "named"})


def pinned(pod: JSON, group: NodeGroup) -> JSON:
    """A pod template (its ``spec``) on ``group``'s nodes, gone at once when deleted."""
    pod["spec"]["nodeSelector"] = dict(group.selector)
    pod["spec"]["terminationGracePeriodSeconds"] = 0
    return pod


def on_nodes(js: JSON, group: NodeGroup, gpus: int | None = None, *,
             annotations: dict[str, str] | None = None,
             priority_class: str | None = None) -> JSON:
    """JobSet ``js`` with every replicated job's pods ``pinned`` to ``group``'s nodes,
    asking ``gpus`` GPUs each (None: as made), with ``annotations`` and of
    ``priority_class``."""
    for rj in js["spec"]["replicatedJobs"]:
        template = rj["template"]["spec"]["template"]
        pinned(template, group)
        if gpus is not None:
            template["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = str(gpus)
        if annotations:
            template.setdefault("metadata", {}).setdefault("annotations", {}).update(annotations)
        if priority_class:
            template["spec"]["priorityClassName"] = priority_class
    return js


def gang(name: str, group: NodeGroup) -> JSON:
    """A JobSet of 2 pods x 2 GPUs on ``group``'s nodes (the reclaim tests' group)."""
    return on_nodes(jobset(name, [("workers", 1, 2)]), group, 2)


def members(admin: Client, ns: str, name: str, label: str = JOBSET_NAME, *,
            terminating: bool = False) -> list[JSON]:
    """The pods of ``ns`` whose ``label`` (a JobSet's name by default) is ``name``;
    those being deleted left out unless ``terminating``."""
    return [p for p in admin.list("v1", "Pod", namespace=ns)["items"]
            if (p["metadata"].get("labels") or {}).get(label) == name
            and (terminating or not p["metadata"].get("deletionTimestamp"))]


def bound(pods: list[JSON]) -> list[JSON]:
    return [p for p in pods if p["spec"].get("nodeName")]


def named(pods: list[JSON]) -> dict[str, JSON]:
    """Pod name -> pod."""
    return {p["metadata"]["name"]: p for p in pods}


def told(admin: Client, ns: str, pods: Iterable[JSON | str], reason: str,
         text: str) -> str | None:
    """The message of the first Event ``reason`` saying ``text`` about one of ``pods``
    (pods or their names); None while there is none."""
    for p in pods:
        name = p if isinstance(p, str) else p["metadata"]["name"]
        for e in events_for(admin, ns, name):
            if e["reason"] == reason and text in e["message"]:
                return str(e["message"])
    return None


def found(admin: Client, api: str, kind: str, name: str,
          namespace: str | None = None) -> JSON | None:
    """The object, or None once it is gone (or before it is made)."""
    try:
        return dict(admin.get(api, kind, name, namespace))
    except NotFound:
        return None


def groups_of(admin: Client, namespace: str, want: int, by: str) -> list[tuple[str, PodGroup]]:
    """(pod name, its group) for every pod of ``namespace`` once there are ``want``
    (made ``by`` their controllers), each read as the pod binding reads it: through
    the live owners. Sorted by pod name."""
    def owners(api: str, kind: str, ns: str, name: str) -> JSON | None:
        return found(admin, api, kind, name, ns)

    pods = eventually(lambda: (lambda items: items if len(items) == want else None)(
        admin.list("v1", "Pod", namespace=namespace)["items"]),
        timeout=90, what=f"{want} pods made by {by}")
    out = [(p["metadata"]["name"], pod_group(p, owners)) for p in pods]
    assert all(isinstance(g, PodGroup) for _, g in out), out
    return sorted(out)  # type: ignore[arg-type]


def nodes_shown(kubeconfig: object, capsys: pytest.CaptureFixture[str],
                names: Iterable[str]) -> list[JSON]:
    """The nodes ``names`` as ``kubectl gpu nodes -o json`` shows them (the ledger
    rebuilt from the API, as the manager does)."""
    capsys.readouterr()
    assert main(["nodes", "-o", "json", "--kubeconfig", str(kubeconfig)]) == 0
    wanted = set(names)
    return [n for n in json.loads(capsys.readouterr().out)["nodes"] if n["name"] in wanted]


def when(text: str) -> datetime:
    """An API timestamp (``...Z``) as a datetime."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def slots_of(text: str) -> dict[int, tuple[str, str]]:
    """A leader's or a launcher's ``group-slots`` annotation: member index -> (node,
    devices)."""
    out = {}
    for part in text.split(";"):
        index, _, where = part.partition("=")
        node, _, devs = where.partition(":")
        out[int(index)] = (node, devs)
    return out
