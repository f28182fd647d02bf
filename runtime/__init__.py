"""The generic reconcile framework: a Python port of controller-runtime and client-go.

See docs/framework.md. Nothing here knows about the domain objects it reconciles.
"""

from runtime.builder import Builder
from runtime.client import Client, ResourceInfo, RestConfig, Watch
from runtime.controller import Controller, Reconciler, Result, TerminalError
from runtime.errors import (
    AlreadyExists,
    ApiError,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    NotLeader,
)
from runtime.eventcorrelator import EventCorrelator
from runtime.events import EventRecorder
from runtime.handler import Request, enqueue_object, enqueue_owner
from runtime.informer import EventHandler, FuncHandler, SharedIndexInformer, SharedInformerFactory
from runtime.leaderelection import LeaderElector
from runtime.manager import (
    EXIT_ANOTHER_LEADER,
    EXIT_CACHE_SYNC_TIMEOUT,
    EXIT_LOST_LEASE,
    EXIT_OK,
    Manager,
    Options,
)
from runtime.store import DeletedFinalStateUnknown, Indexer, freeze, thaw
from runtime.workqueue import WorkQueue

__all__ = [
    "EXIT_ANOTHER_LEADER",
    "EXIT_CACHE_SYNC_TIMEOUT",
    "EXIT_LOST_LEASE",
    "EXIT_OK",
    "AlreadyExists",
    "ApiError",
    "Builder",
    "Client",
    "Conflict",
    "Controller",
    "DeletedFinalStateUnknown",
    "EventCorrelator",
    "EventHandler",
    "EventRecorder",
    "Forbidden",
    "FuncHandler",
    "Gone",
    "Indexer",
    "Invalid",
    "LeaderElector",
    "Manager",
    "NotFound",
    "NotLeader",
    "Options",
    "Reconciler",
    "Request",
    "ResourceInfo",
    "RestConfig",
    "Result",
    "SharedIndexInformer",
    "SharedInformerFactory",
    "TerminalError",
    "Watch",
    "WorkQueue",
    "enqueue_object",
    "enqueue_owner",
    "freeze",
    "thaw",
]
