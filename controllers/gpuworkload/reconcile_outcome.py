"""What one GPUWorkload reconcile reports (``Outcome``), and how a step says that
the attempt cannot go on (``EndAttempt``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from controllers.status.builder import StatusBuilder
from internal.objects import JSON
from runtime import Result


@dataclass
class Outcome:
    """What one reconcile decided to report: the status it wants, Events, requeue."""

    status: StatusBuilder
    result: Result | None = None
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, msg)
    raw: JSON | None = None  # the object as last written during the reconcile

    def warn(self, reason: str, message: str) -> Outcome:
        self.events.append(("Warning", reason, message))
        return self

    def normal(self, reason: str, message: str) -> Outcome:
        self.events.append(("Normal", reason, message))
        return self


class EndAttempt(Exception):
    """Raised inside a reconcile when the attempt cannot go on (reason, message);
    ``spend`` says whether it counts against ``maxRetries``."""

    def __init__(self, reason: str, message: str, *, spend: bool = True) -> None:
        super().__init__(message)
        self.reason, self.message, self.spend = reason, message, spend
