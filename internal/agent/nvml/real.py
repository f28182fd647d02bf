"""The backend on real GPUs, through pynvml (nvidia-ml-py).

Each reading is taken on its own: a field the device does not support
(``NVMLError_NotSupported``, or no permission) is ``None`` and the others are still
read. An error that means the device itself is gone (GPU lost, unknown error, ...)
marks the device with ``error`` so that it is reported unhealthy.

Critical XIDs are collected from an NVML event set (best effort: where events are
not supported, XIDs are simply not seen), drained at the start of every poll.

On a MIG-enabled device the instances are read too (``_mig_devices``): each MIG
device's UUID and memory, its GPU instance's placement, and the profile's name as
NVIDIA writes it (``<slices>g.<GiB>gb``, from the GPU instance profiles the device
offers). A MIG reading that fails leaves the device with no instances (nothing of it
is offered), never with made-up ones.

Not run on hardware in this repository's CI; the fixture backend stands in for it.
``hack.nvml_probe`` ran it on an H100 (docs/agent.md, "On real hardware").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from typing import Any

import structlog

from internal.agent.nvml.types import MigDevice, NvLink, RawDevice, RemoteType

log = structlog.get_logger("agent.nvml")


def profile_name(driver_name: str, slices: int, memory_mb: int) -> str:
    """A GPU instance profile's name as ``nvidia-smi mig -lgip`` prints it, less its
    ``MIG `` prefix: the driver's own (v2 profile info) where it gives one, else
    ``<slices>g.<GiB rounded up>gb``. Read on an H100 80GB (driver 580): 7 slices of
    81152 MB is ``7g.80gb`` (rounding to nearest said 79), and profile 20 is
    ``1g.10gb+me``, which the formula alone cannot tell from ``1g.10gb``."""
    name = driver_name.strip().removeprefix("MIG ").strip()
    return name or f"{slices}g.{-(-memory_mb // 1024)}gb"


class NvmlUnavailable(RuntimeError):
    """The NVML library or the driver could not be loaded."""


def _text(v: Any) -> str:
    if isinstance(v, bytes):
        return v.decode(errors="replace").rstrip("\x00")
    return str(v)


class _Reader:
    """Calls NVML functions for one device, mapping 'not supported' to None and
    remembering the first error that means the device cannot be read."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.error: str | None = None
        self._soft = (nvml.NVMLError_NotSupported, nvml.NVMLError_NoPermission,
                      nvml.NVMLError_FunctionNotFound)

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self._soft:
            return None
        except self.nvml.NVMLError as e:
            if self.error is None:
                self.error = f"{fn.__name__}: {e}"
            return None


class RealNvmlBackend:
    name = "nvml"

    def __init__(self) -> None:
        try:
            import pynvml
        except ImportError as e:  # pragma: no cover - a dependency
            raise NvmlUnavailable(f"pynvml not installed: {e}") from e
        self.nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise NvmlUnavailable(f"NVML did not load: {e}") from e
        self._lock = threading.Lock()
        self._xids: dict[str, set[int]] = {}  # uuid -> critical XIDs seen
        self._events: Any = None
        self._setup_events()

    # ------------------------------------------------------------------ XIDs
    def _setup_events(self) -> None:
        n = self.nvml
        try:
            self._events = n.nvmlEventSetCreate()
        except n.NVMLError as e:
            log.info("nvml.events_unsupported", error=str(e))
            return
        for i in range(n.nvmlDeviceGetCount()):
            try:
                h = n.nvmlDeviceGetHandleByIndex(i)
                n.nvmlDeviceRegisterEvents(h, n.nvmlEventTypeXidCriticalError, self._events)
            except n.NVMLError as e:
                log.info("nvml.xid_events_unsupported", device=i, error=str(e))

    def _drain_events(self) -> None:
        n = self.nvml
        if self._events is None:
            return
        for _ in range(1000):
            try:
                ev = n.nvmlEventSetWait_v2(self._events, 0)
            except n.NVMLError_Timeout:
                return
            except n.NVMLError as e:
                log.warning("nvml.event_wait_failed", error=str(e))
                return
            if ev.eventType != n.nvmlEventTypeXidCriticalError:
                continue
            try:
                uuid = _text(n.nvmlDeviceGetUUID(ev.device))
            except n.NVMLError:
                uuid = "*"  # NVML reports events not tied to one device this way
            xid = int(ev.eventData)
            self._xids.setdefault(uuid, set()).add(xid)
            log.warning("nvml.xid", uuid=uuid, xid=xid)

    # ------------------------------------------------------------------ NvmlBackend
    def device_count(self) -> int:
        with self._lock:
            self._drain_events()
            return int(self.nvml.nvmlDeviceGetCount())

    def read_device(self, index: int) -> RawDevice:
        n = self.nvml
        try:
            h = n.nvmlDeviceGetHandleByIndex(index)
        except n.NVMLError as e:
            return RawDevice(index=index, error=f"nvmlDeviceGetHandleByIndex: {e}")
        r = _Reader(n)
        uuid = r(n.nvmlDeviceGetUUID, h)
        name = r(n.nvmlDeviceGetName, h)
        pci = r(n.nvmlDeviceGetPciInfo, h)
        mem = r(n.nvmlDeviceGetMemoryInfo, h)
        util = r(n.nvmlDeviceGetUtilizationRates, h)
        temp = r(n.nvmlDeviceGetTemperature, h, n.NVML_TEMPERATURE_GPU)
        power = r(n.nvmlDeviceGetPowerUsage, h)
        ecc = r(n.nvmlDeviceGetTotalEccErrors, h, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                n.NVML_VOLATILE_ECC)
        mig = r(n.nvmlDeviceGetMigMode, h)
        mig_on = (int(mig[0]) == n.NVML_DEVICE_MIG_ENABLE) if mig is not None else None
        links, links_read = self._nvlinks(h)
        uuid_s = _text(uuid) if uuid is not None else ""
        with self._lock:
            xids = tuple(sorted(self._xids.get(uuid_s, set()) | self._xids.get("*", set())))
        return RawDevice(
            index=index,
            uuid=uuid_s,
            name=_text(name) if name is not None else "",
            pci_bus_id=_text(pci.busId) if pci is not None else "",
            memory_total_bytes=int(mem.total) if mem is not None else None,
            memory_used_bytes=int(mem.used) if mem is not None else None,
            utilization_gpu=int(util.gpu) if util is not None else None,
            temperature_c=int(temp) if temp is not None else None,
            power_mw=int(power) if power is not None else None,
            ecc_uncorrected_volatile=int(ecc) if ecc is not None else None,
            mig_enabled=mig_on,
            mig_devices=self._mig_devices(h) if mig_on else (),
            nvlinks=links,
            nvlinks_read=links_read,
            xid_errors=xids,
            error=r.error,
        )

    def _mig_devices(self, h: Any) -> tuple[MigDevice, ...]:
        """The MIG instances of a MIG-enabled device (empty when they cannot be read)."""
        n = self.nvml
        try:
            names = self._profile_names(h)
            out = []
            for i in range(int(n.nvmlDeviceGetMaxMigDeviceCount(h))):
                try:
                    mh = n.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                except n.NVMLError_NotFound:
                    continue  # an empty slot
                gi = n.nvmlDeviceGetGpuInstanceById(h, n.nvmlDeviceGetGpuInstanceId(mh))
                info = n.nvmlGpuInstanceGetInfo(gi)
                out.append(MigDevice(
                    uuid=_text(n.nvmlDeviceGetUUID(mh)),
                    profile=names.get(int(info.profileId), f"profile-{info.profileId}"),
                    memory_total_bytes=int(n.nvmlDeviceGetMemoryInfo(mh).total),
                    start=int(info.placement.start), size=int(info.placement.size)))
            return tuple(out)
        except n.NVMLError as e:
            log.warning("nvml.mig_read_failed", error=str(e))
            return ()

    def _profile_names(self, h: Any) -> dict[int, str]:
        """GPU instance profile id -> NVIDIA's name (``1g.10gb``, ``1g.10gb+me``)."""
        n = self.nvml
        out: dict[int, str] = {}
        for p in range(int(n.NVML_GPU_INSTANCE_PROFILE_COUNT)):
            try:
                info = n.nvmlDeviceGetGpuInstanceProfileInfo(h, p)
            except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
                continue
            out[int(info.id)] = profile_name(_text(getattr(info, "name", b"")),
                                             int(info.sliceCount), int(info.memorySizeMB))
        return out

    def _nvlinks(self, h: Any) -> tuple[tuple[NvLink, ...], bool]:
        """Active links with their far ends; (links, False) when they could not be read."""
        n = self.nvml
        out: list[NvLink] = []
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                state = n.nvmlDeviceGetNvLinkState(h, link)
            except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
                # link 0 unsupported: no NVLink on this device; later: no such link
                if link == 0:
                    return (), True
                continue
            except n.NVMLError as e:
                log.warning("nvml.nvlink_state_failed", link=link, error=str(e))
                return tuple(out), False
            if state != n.NVML_FEATURE_ENABLED:
                continue
            try:
                remote = _text(n.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)
            except n.NVMLError as e:
                log.warning("nvml.nvlink_remote_failed", link=link, error=str(e))
                return tuple(out), False
            out.append(NvLink(link, remote, self._remote_type(h, link)))
        return tuple(out), True

    def _remote_type(self, h: Any, link: int) -> RemoteType:
        n = self.nvml
        try:
            t = n.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
        except n.NVMLError:
            return RemoteType.UNKNOWN
        if t == n.NVML_NVLINK_DEVICE_TYPE_GPU:
            return RemoteType.GPU
        if t == n.NVML_NVLINK_DEVICE_TYPE_SWITCH:
            return RemoteType.SWITCH
        return RemoteType.OTHER

    def driver_version(self) -> str | None:
        try:
            return _text(self.nvml.nvmlSystemGetDriverVersion())
        except self.nvml.NVMLError:
            return None

    def cuda_version(self) -> str | None:
        try:
            v = int(self.nvml.nvmlSystemGetCudaDriverVersion())
        except self.nvml.NVMLError:
            return None
        return f"{v // 1000}.{(v % 1000) // 10}"

    def close(self) -> None:
        n = self.nvml
        if self._events is not None:
            with contextlib.suppress(n.NVMLError):
                n.nvmlEventSetFree(self._events)
            self._events = None
        with contextlib.suppress(n.NVMLError):
            n.nvmlShutdown()
