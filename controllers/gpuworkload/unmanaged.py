"""Running work this controller's configuration cannot manage is left running.

A restart, a flag change or a disabled feature never deletes running work. Today one
configuration cannot manage a placed workload: ``deviceExposure: dra`` (its children
were made with ResourceClaims) in a manager without DRA (no ``--enable-dra``, or an
API server that does not serve ``resource.k8s.io/v1``). Such a workload:

| observed                          | what it does                                       |
| --------------------------------- | -------------------------------------------------- |
| children of this attempt exist    | left alone: none created, none deleted, no retry   |
|                                   | spent; its booking kept (its pods hold their       |
|                                   | devices anyway); phase follows its children;       |
|                                   | ``Managed=False DRAUnavailable``, one Warning;     |
|                                   | a spec edit waits for DRA too (its restart would   |
|                                   | delete pods it could not make again)               |
| its children all succeeded        | ``Succeeded`` as usual; ``Managed=False`` says its |
|                                   | claims stay allocated until DRA is back            |
| placed, no child made yet         | booking released, back to ``Pending`` with         |
|                                   | ``Scheduled=False DRAUnavailable`` (no retry spent)|

Its ResourceClaims are not read or written while DRA is off: they stay allocated and
reserved (a claim whose pod went meanwhile is released by the claim controller once
the manager runs with DRA again, as any claim no booking wants). Restarted with DRA,
the next reconcile manages the workload as before and ``Managed`` turns ``True``.

Deleted while DRA is off, its claims are released by its deletion once its pods are
gone (``release_claims_of_deleted``): no claim controller runs to do it.

Which exposure an attempt uses is read from its children (their
``gpu.orchestrator.dev/exposure`` annotation), not from today's flags: a changed
``--device-exposure`` applies to new attempts only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import structlog

from api.v1alpha1.keys import EXPOSURE_ANNOTATION
from api.v1alpha1.types import DeviceExposure, Phase
from controllers.dra.availability import REASON
from controllers.dra.claim_release import release_workload_claims
from controllers.gpuworkload.reconcile_outcome import Outcome
from controllers.status.builder import StatusBuilder
from controllers.status.conditions import (
    MANAGED,
    READY,
    SCHEDULED,
    aggregate,
    child_phase,
    get_condition,
)
from internal.objects import JSON, object_key
from runtime import ApiError
from runtime.events import EventRecorder

log = structlog.get_logger("gpuworkload")


#: the reason ``Managed`` turns True with, once the configuration manages it again
MANAGED_AGAIN = "ManagedAgain"


def child_exposure(child: JSON) -> DeviceExposure | None:
    """The exposure a child (Pod, or Job) was made with; None if it does not say."""
    value = ((child.get("metadata") or {}).get("annotations") or {}).get(EXPOSURE_ANNOTATION)
    try:
        return DeviceExposure(value) if value else None
    except ValueError:
        return None


def attempt_exposure(children: Mapping[int, JSON], wanted: DeviceExposure) -> DeviceExposure:
    """The exposure of a running attempt: the one its children were made with (all
    of an attempt's are made alike), else ``wanted`` (the spec's or the default)."""
    for _, child in sorted(children.items()):
        made = child_exposure(child)
        if made is not None:
            return made
    return wanted


def managed_again(raw: JSON, status: StatusBuilder) -> None:
    """A workload reported ``Managed=False`` is managed by this configuration: the
    condition turns True (a reconcile that still cannot manage it sets it back)."""
    cond = get_condition(raw.get("status") or {}, MANAGED) or {}
    if cond.get("status") == "False":
        status.condition(MANAGED, True, MANAGED_AGAIN, "managed by this controller again")


def leave_running(raw: JSON, status: StatusBuilder, replicas: int,
                  children: Mapping[int, JSON], why: str,
                  changed: str = "", *, phase_of: Callable[[JSON], str] = child_phase
                  ) -> tuple[Outcome, bool]:
    """The report of a placed workload whose children exist and that this
    configuration cannot manage (the module's table). Returns the outcome and
    whether all its replicas succeeded (the caller releases its booking then).
    ``phase_of``: a child's phase (``ChildAPI.phase``: a Job's from its pods)."""
    phases = {i: phase_of(c) for i, c in children.items() if i < replicas}
    phase, message = aggregate(phases, replicas)
    claims = "its ResourceClaims stay allocated"
    if phase is Phase.SUCCEEDED:
        msg = (f"deviceExposure dra is unavailable ({why}): {claims} until the "
               f"controller runs with DRA, which releases them")
        status.phase(phase, message).condition(READY, False, "Succeeded", message)
    else:
        msg = (f"deviceExposure dra is unavailable ({why}): its {len(children)} "
               f"child(ren) are left running as they are (none created or deleted, "
               f"{claims}) until the controller runs with DRA again")
        if changed:
            msg += f"; its spec changed ({changed}), applied then"
        if phase is Phase.FAILED:
            # not acted on: the phase stays, the message says what happened
            message = f"{message}; left as is, not retried"
            status.phase(Phase(status.status["phase"]), message)
        else:
            status.phase(phase, message)
        status.condition(READY, phase is Phase.RUNNING, "Running" if phase is Phase.RUNNING
                         else "Starting" if phase is not Phase.FAILED else "ReplicaFailed",
                         message)
    status.condition(MANAGED, False, REASON, msg)
    out = Outcome(status)
    told = get_condition(raw.get("status") or {}, MANAGED) or {}
    if (told.get("status"), told.get("reason"), told.get("message")) != ("False", REASON, msg):
        out.warn(REASON, msg)
    return out, phase is Phase.SUCCEEDED


def back_to_pending(status: StatusBuilder, why: str) -> Outcome:
    """A placed workload none of whose children exists yet: its placement is given up
    (the caller releases the booking) and it waits, as an unplaced one does."""
    msg = f"deviceExposure dra is unavailable: {why}"
    status.placements(None).phase(Phase.PENDING, msg)
    status.condition(SCHEDULED, False, REASON, msg).condition(READY, False, REASON, msg)
    return Outcome(status).warn(REASON, msg)


def release_claims_of_deleted(client: Any, recorder: EventRecorder, raw: JSON,
                              default_exposure: DeviceExposure) -> None:
    """A dra workload deleted while the manager runs without DRA (the API served):
    no claim controller releases its claims, so its deletion does, once its pods are
    gone (controllers/dra/claim_release.py). A manager that may not touch ResourceClaims
    (403), or an API that does not serve them (404), says so and lets the object go
    (a manager with DRA releases them later); other errors are retried."""
    exposure = (raw.get("spec") or {}).get("deviceExposure") or default_exposure.value
    if exposure != DeviceExposure.DRA.value:
        return
    try:
        names = release_workload_claims(client, raw)
    except ApiError as exc:
        if exc.status not in (403, 404):
            raise  # the API failed for a moment: the deletion is tried again
        log.warning("claims.kept", workload=object_key(raw), error=str(exc))
        recorder.warning(raw, "ClaimsKept", f"its ResourceClaims stay allocated "
                         f"({exc.status} {exc.reason}): a manager with --enable-dra "
                         f"releases them")
        return
    if names:
        log.info("claims.released", workload=object_key(raw), claims=names)
