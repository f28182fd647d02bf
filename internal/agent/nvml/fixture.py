"""A backend that replays recorded NVML readings from JSON (``internal/agent/fixtures``).

Format (values are what NVML returns; ``null`` = NVML said NotSupported)::

    {"description": "...", "driverVersion": "550.54.15", "cudaDriverVersion": 12040,
     "devices": [{"index": 0, "uuid": "GPU-...", "name": "NVIDIA H100 80GB HBM3",
                  "pciBusId": "00000000:18:00.0",
                  "memory": {"total": <bytes>, "used": <bytes>},
                  "utilization": {"gpu": <percent>, "memory": <percent>},
                  "temperature": <celsius>, "powerUsage": <milliwatts>,
                  "eccErrors": {"volatileUncorrected": <count>},
                  "migMode": {"current": 0|1, "pending": 0|1},
                  "migDevices": [{"uuid": "MIG-...", "profile": "1g.10gb",
                                  "memory": {"total": <bytes>},
                                  "placement": {"start": 0, "size": 1}}],
                  "nvlinks": [{"link": 0, "remotePciBusId": "...",
                               "remoteDeviceType": "gpu"|"switch"|"other"}],
                  "xidErrors": [<critical XIDs seen>],
                  "error": null | "<NVML error text>"}]}

``"nvlinks": null`` means the link states could not be read (topology unknown); an
empty list means the device has no NVLink.

The readings can be changed while an agent polls them: in memory
(:meth:`FixtureBackend.update_device`, :meth:`mark_unhealthy`), or by rewriting the
file, which is re-read when its modification time changes.
"""

from __future__ import annotations

import copy
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from internal.agent.nvml.types import MigDevice, NvLink, RawDevice, RemoteType

FIXTURES_DIR = Path(__file__).resolve().parent.parent / "fixtures"


def fixture_path(name_or_path: str) -> Path:
    """A fixture by name (``h100-sxm-8``) from the bundled folder, or a file path."""
    p = Path(name_or_path)
    if p.suffix == ".json" or os.sep in name_or_path:
        return p
    return FIXTURES_DIR / f"{name_or_path}.json"


def available_fixtures() -> list[str]:
    return sorted(p.stem for p in FIXTURES_DIR.glob("*.json"))


def _deep_merge(dst: dict[str, Any], patch: Mapping[str, Any]) -> None:
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(dst.get(k), dict):
            _deep_merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def _get(d: Mapping[str, Any], *keys: str) -> Any:
    cur: Any = d
    for k in keys:
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(k)
    return cur


def parse_device(d: Mapping[str, Any]) -> RawDevice:
    """One fixture device -> :class:`RawDevice`."""
    raw_links = d.get("nvlinks")
    links = tuple(
        NvLink(
            link=int(link.get("link", n)),
            remote_pci_bus_id=str(link.get("remotePciBusId") or ""),
            remote_type=RemoteType(link.get("remoteDeviceType") or "gpu"),
        )
        for n, link in enumerate(raw_links or ())
        if link.get("active", True)
    )
    mig = _get(d, "migMode", "current")

    def opt_int(*keys: str) -> int | None:
        v = _get(d, *keys)
        return None if v is None else int(v)

    return RawDevice(
        index=int(d["index"]),
        uuid=str(d.get("uuid") or ""),
        name=str(d.get("name") or ""),
        pci_bus_id=str(d.get("pciBusId") or ""),
        memory_total_bytes=opt_int("memory", "total"),
        memory_used_bytes=opt_int("memory", "used"),
        utilization_gpu=opt_int("utilization", "gpu"),
        temperature_c=opt_int("temperature"),
        power_mw=opt_int("powerUsage"),
        ecc_uncorrected_volatile=opt_int("eccErrors", "volatileUncorrected"),
        mig_enabled=None if mig is None else bool(mig),
        mig_devices=tuple(
            MigDevice(uuid=str(m["uuid"]), profile=str(m.get("profile") or ""),
                      memory_total_bytes=int(_get(m, "memory", "total") or 0),
                      start=int(_get(m, "placement", "start") or 0),
                      size=int(_get(m, "placement", "size") or 0))
            for m in d.get("migDevices") or ()),
        nvlinks=links,
        nvlinks_read=raw_links is not None,
        xid_errors=tuple(int(x) for x in d.get("xidErrors") or ()),
        error=d.get("error") or None,
    )


class FixtureBackend:
    """Recorded readings, optionally backed by a file that is re-read on change."""

    def __init__(self, data: Mapping[str, Any] | None = None, *, path: str | Path | None = None,
                 name: str = "fixture") -> None:
        if (data is None) == (path is None):
            raise ValueError("give either data or path")
        self._lock = threading.Lock()
        self._path = Path(path) if path is not None else None
        self._mtime: float | None = None
        self._data: dict[str, Any] = {}
        self.name = name
        if data is not None:
            self._data = copy.deepcopy(dict(data))
        else:
            self._reload()

    @classmethod
    def load(cls, name_or_path: str) -> FixtureBackend:
        """A bundled fixture by name (``h100-sxm-8``, ``pcie-4``, ``a100-ecc-4``) or a file."""
        p = fixture_path(name_or_path)
        return cls(path=p, name=f"fixture:{p.stem}")

    # ---------------------------------------------------------------- file reload
    def _reload(self) -> None:
        assert self._path is not None
        st = self._path.stat()
        with self._path.open("rb") as f:
            data = json.load(f)
        self._data, self._mtime = data, st.st_mtime

    def _maybe_reload(self) -> None:
        if self._path is None:
            return
        try:
            mtime = self._path.stat().st_mtime
        except OSError:
            return  # keep the last readings while the file is being replaced
        if mtime != self._mtime:
            try:
                self._reload()
            except (OSError, ValueError):
                return  # half-written file: try again next poll

    # ---------------------------------------------------------------- NvmlBackend
    def device_count(self) -> int:
        with self._lock:
            self._maybe_reload()
            return len(self._data.get("devices") or ())

    def read_device(self, index: int) -> RawDevice:
        """The ``index``-th recorded device (NVML enumeration order)."""
        with self._lock:
            devs = self._data.get("devices") or ()
            if 0 <= index < len(devs):
                return parse_device(devs[index])
        return RawDevice(index=index, error="device not found in fixture")

    def driver_version(self) -> str | None:
        with self._lock:
            v = self._data.get("driverVersion")
        return None if v is None else str(v)

    def cuda_version(self) -> str | None:
        with self._lock:
            v = self._data.get("cudaDriverVersion")
        return None if v is None else cuda_version_string(int(v))

    def close(self) -> None:
        pass

    # ---------------------------------------------------------------- mutation
    @property
    def data(self) -> dict[str, Any]:
        """A copy of the current fixture document."""
        with self._lock:
            return copy.deepcopy(self._data)

    def update_device(self, index: int, patch: Mapping[str, Any]) -> None:
        """Deep-merge ``patch`` (fixture keys) into device ``index``."""
        with self._lock:
            for d in self._data.get("devices") or ():
                if int(d["index"]) == index:
                    _deep_merge(d, patch)
                    return
        raise KeyError(f"no device {index} in fixture {self.name}")

    def mark_unhealthy(self, index: int, ecc_errors: int = 1) -> None:
        """Give device ``index`` volatile uncorrected ECC errors (and XID 48)."""
        self.update_device(index, {"eccErrors": {"volatileUncorrected": ecc_errors},
                                   "xidErrors": [48]})

    def mark_healthy(self, index: int) -> None:
        self.update_device(index, {"eccErrors": {"volatileUncorrected": 0}, "xidErrors": [],
                                   "error": None})

    def remove_device(self, index: int) -> None:
        """The device falls off the bus (NVML no longer counts it)."""
        with self._lock:
            self._data["devices"] = [
                d for d in self._data.get("devices") or () if int(d["index"]) != index
            ]


def cuda_version_string(v: int) -> str:
    """NVML's ``12040`` -> ``"12.4"``."""
    return f"{v // 1000}.{(v % 1000) // 10}"
