"""NVML readings: recorded fixtures, health, NVLink peers, and the pynvml backend
against a stand-in pynvml module (no GPU here)."""

from __future__ import annotations

import json
import os
import types
from datetime import UTC, datetime
from typing import Any

import pytest

from internal.agent.nvml import (
    FixtureBackend,
    NvmlUnavailable,
    RealNvmlBackend,
    available_fixtures,
    sample,
    select_backend,
)
from internal.agent.nvml.health import is_healthy
from internal.agent.nvml.real import profile_name
from internal.agent.nvml.topology import normalize_bus_id, nvlink_peers, topology_known
from internal.agent.nvml.types import NvLink, RawDevice, RemoteType


def test_bundled_fixtures() -> None:
    assert available_fixtures() == ["a100-ecc-4", "a100-mig-4", "h100-1-recorded",
                                    "h100-sxm-8", "pcie-4"]


def test_recorded_h100_reads_as_the_real_backend_published_it() -> None:
    """The fixture recorded from a real H100 (hack.nvml_probe) replays to the GPUNode
    status the real backend built on that machine."""
    from internal.agent.status import build_status
    s = sample(FixtureBackend.load("h100-1-recorded"))
    (d,) = s.devices
    assert (d.model, d.memory_total_bytes >> 20, d.memory_used_bytes >> 20) == (
        "NVIDIA H100 80GB HBM3", 81559, 480)
    assert d.healthy and not d.mig_mode and d.nvlink_peers == () and s.topology_known
    st = build_status(s, datetime(2026, 11, 28, tzinfo=UTC))
    assert (st["driverVersion"], st["cudaVersion"], st["healthyCount"]) == (
        "580.159.04", "13.0", 1)
    assert st["devices"][0]["powerWatts"] == pytest.approx(76.399)


# GPU instance profiles of one H100 80GB HBM3 (driver 580.159.04) as NVML's v2 profile
# info gave them: (name, slices, memory MB); nvidia-smi mig -lgip printed the same names
H100_PROFILES = [("MIG 1g.10gb", 1, 9984), ("MIG 2g.20gb", 2, 20096),
                 ("MIG 3g.40gb", 3, 40448), ("MIG 4g.40gb", 4, 40448),
                 ("MIG 7g.80gb", 7, 81152), ("MIG 1g.10gb+me", 1, 9984),
                 ("MIG 1g.20gb", 1, 20096)]


@pytest.mark.parametrize(("driver_name", "slices", "mb"), H100_PROFILES)
def test_mig_profiles_are_named_as_nvidia_names_them(driver_name: str, slices: int,
                                                     mb: int) -> None:
    want = driver_name.removeprefix("MIG ")
    assert profile_name(driver_name, slices, mb) == want
    if "+" not in want:  # an older driver gives no name: the figures alone say it
        assert profile_name("", slices, mb) == want


def test_h100_fixture_is_eight_healthy_all_to_all_nvlinked_devices() -> None:
    s = sample(FixtureBackend.load("h100-sxm-8"))
    assert [d.index for d in s.devices] == list(range(8))
    assert all(d.healthy and d.model == "NVIDIA H100 80GB HBM3" for d in s.devices)
    assert s.devices[0].memory_total_bytes == 81559 * 1024 * 1024
    assert s.devices[2].utilization == 87 and s.devices[2].power_watts == pytest.approx(512.345)
    for d in s.devices:
        assert d.nvlink_peers == tuple(i for i in range(8) if i != d.index)
    assert s.topology_known and s.driver_version == "550.54.15" and s.cuda_version == "12.4"
    assert len({d.uuid for d in s.devices}) == 8


def test_pcie_fixture_has_no_nvlink_but_known_topology() -> None:
    s = sample(FixtureBackend.load("pcie-4"))
    assert len(s.devices) == 4
    assert all(d.nvlink_peers == () and d.healthy and not d.mig_mode for d in s.devices)
    assert s.topology_known


def test_ecc_fixture_has_one_unhealthy_device_and_direct_links() -> None:
    s = sample(FixtureBackend.load("a100-ecc-4"))
    assert [d.healthy for d in s.devices] == [True, True, False, True]
    bad = s.devices[2]
    assert bad.ecc_errors == 2 and "ECC" in bad.unhealthy_reason
    assert s.devices[0].nvlink_peers == (1, 2, 3)


def test_mutating_a_fixture_flips_health() -> None:
    be = FixtureBackend.load("h100-sxm-8")
    be.mark_unhealthy(5, ecc_errors=3)
    s = sample(be)
    assert not s.devices[5].healthy and s.devices[5].ecc_errors == 3
    be.mark_healthy(5)
    assert sample(be).devices[5].healthy
    with pytest.raises(KeyError):
        be.update_device(99, {"temperature": 1})


def test_fixture_file_is_reread_when_it_changes(tmp_path: Any) -> None:
    doc = FixtureBackend.load("pcie-4").data
    path = tmp_path / "node.json"
    path.write_text(json.dumps(doc))
    be = select_backend(f"fixture:{path}")
    assert sample(be).devices[1].healthy
    doc["devices"][1]["error"] = "GPU is lost"
    path.write_text(json.dumps(doc))
    st = os.stat(path)
    os.utime(path, (st.st_atime, st.st_mtime + 5))
    s = sample(be)
    assert not s.devices[1].healthy and "GPU is lost" in s.devices[1].unhealthy_reason
    assert not s.topology_known  # an unreadable device makes the topology unknown


@pytest.mark.parametrize(("dev", "healthy"), [
    (RawDevice(0), True),
    (RawDevice(0, ecc_uncorrected_volatile=None), True),  # ECC not supported
    (RawDevice(0, ecc_uncorrected_volatile=1), False),
    (RawDevice(0, xid_errors=(13, 43)), True),  # application XIDs
    (RawDevice(0, xid_errors=(79,)), False),  # fell off the bus
    (RawDevice(0, error="Unknown Error"), False),
])
def test_health(dev: RawDevice, healthy: bool) -> None:
    assert is_healthy(dev) is healthy


def test_bus_ids_normalise() -> None:
    assert normalize_bus_id("00000000:1A:00.0") == normalize_bus_id(b"0000:1a:00.0\x00")
    assert normalize_bus_id("0000:1a:00.0") == "00000000:1a:00.0"


def _gpu(i: int, bus: str, *links: NvLink, read: bool = True) -> RawDevice:
    return RawDevice(i, pci_bus_id=bus, nvlinks=links, nvlinks_read=read)


def test_direct_links_map_remote_bus_ids_to_local_indices_symmetrically() -> None:
    devs = [
        _gpu(0, "0000:01:00.0", NvLink(0, "00000000:02:00.0")),
        _gpu(1, "0000:02:00.0"),  # its side of the link not reported: still a peer of 0
        _gpu(2, "0000:03:00.0", NvLink(0, "0000:04:00.0"), NvLink(1, "0000:04:00.0")),
        _gpu(3, "0000:04:00.0", NvLink(0, "0000:99:00.0")),  # another host's device
    ]
    assert nvlink_peers(devs) == {0: (1,), 1: (0,), 2: (3,), 3: (2,)}


def test_switch_links_join_gpus_sharing_a_switch() -> None:
    sw = RemoteType.SWITCH
    devs = [
        _gpu(0, "0000:01:00.0", NvLink(0, "0000:a0:00.0", sw)),
        _gpu(1, "0000:02:00.0", NvLink(0, "0000:a0:00.0", sw)),
        _gpu(2, "0000:03:00.0", NvLink(0, "0000:b0:00.0", sw)),
        _gpu(3, "0000:04:00.0", NvLink(0, "0000:b0:00.0", RemoteType.UNKNOWN)),
    ]
    assert nvlink_peers(devs) == {0: (1,), 1: (0,), 2: (3,), 3: (2,)}
    assert topology_known(devs)
    assert not topology_known([*devs[:3], _gpu(3, "0000:04:00.0", read=False)])


# --------------------------------------------------------------- pynvml stand-in


class _Err(Exception):
    pass


def _fake_pynvml(devices: list[dict[str, Any]]) -> types.SimpleNamespace:
    """Enough of pynvml's surface for RealNvmlBackend, driven by plain dicts."""
    m = types.SimpleNamespace()
    m.NVMLError = _Err
    for n in ("NotSupported", "NoPermission", "FunctionNotFound", "InvalidArgument",
              "Timeout", "GpuIsLost"):
        setattr(m, f"NVMLError_{n}", type(f"NVMLError_{n}", (_Err,), {}))
    m.NVML_TEMPERATURE_GPU = 0
    m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    m.NVML_VOLATILE_ECC = 0
    m.NVML_DEVICE_MIG_ENABLE = 1
    m.NVML_FEATURE_ENABLED = 1
    m.NVML_NVLINK_MAX_LINKS = 4
    m.NVML_NVLINK_DEVICE_TYPE_GPU = 0
    m.NVML_NVLINK_DEVICE_TYPE_SWITCH = 2
    m.nvmlEventTypeXidCriticalError = 8
    m.events = []  # (device index, xid) queued for nvmlEventSetWait_v2

    def field(key: str) -> Any:
        def fn(h: int, *args: Any) -> Any:
            v = devices[h].get(key)
            if isinstance(v, type) and issubclass(v, Exception):
                raise v("nope")
            if callable(v):
                return v(*args)
            return v
        fn.__name__ = key
        return fn

    m.nvmlInit = lambda: None
    m.nvmlShutdown = lambda: None
    m.nvmlDeviceGetCount = lambda: len(devices)
    m.nvmlDeviceGetHandleByIndex = lambda i: i
    for key in ("UUID", "Name", "PciInfo", "MemoryInfo", "UtilizationRates", "Temperature",
                "PowerUsage", "TotalEccErrors", "MigMode", "NvLinkState",
                "NvLinkRemotePciInfo", "NvLinkRemoteDeviceType"):
        setattr(m, f"nvmlDeviceGet{key}", field(key))
    m.nvmlSystemGetDriverVersion = lambda: "550.54.15"
    m.nvmlSystemGetCudaDriverVersion = lambda: 12040
    m.nvmlEventSetCreate = lambda: "set"
    m.nvmlEventSetFree = lambda s: None
    m.nvmlDeviceRegisterEvents = lambda h, t, s: None

    def wait(s: Any, ms: int) -> Any:
        if not m.events:
            raise m.NVMLError_Timeout("timeout")
        dev, xid = m.events.pop(0)
        return types.SimpleNamespace(device=dev, eventType=8, eventData=xid)

    m.nvmlEventSetWait_v2 = wait
    return m


def _backend(mod: types.SimpleNamespace) -> RealNvmlBackend:
    be = RealNvmlBackend.__new__(RealNvmlBackend)
    import threading

    be.nvml, be._lock, be._xids, be._events = mod, threading.Lock(), {}, None
    be._setup_events()
    return be


def test_real_backend_reads_fields_and_tolerates_not_supported() -> None:
    ns = types.SimpleNamespace
    bus = ["00000000:18:00.0", "00000000:2A:00.0"]

    def dev(i: int) -> dict[str, Any]:
        return {
            "UUID": f"GPU-{i}", "Name": b"NVIDIA H100 80GB HBM3",
            "PciInfo": ns(busId=bus[i].encode()),
            "MemoryInfo": ns(total=80 << 30, used=1 << 30),
            "UtilizationRates": ns(gpu=40 + i, memory=3),
            "Temperature": lambda _kind: 50, "PowerUsage": 123456,
            "TotalEccErrors": lambda _t, _c: 0, "MigMode": [0, 0],
            "NvLinkState": lambda link: 1 if link < 2 else 0,
            "NvLinkRemotePciInfo": lambda link, i=i: ns(busId=bus[1 - i]),
            "NvLinkRemoteDeviceType": lambda link: 0,
        }
    devs = [dev(0), dev(1)]
    devs[1]["PowerUsage"] = None
    mod = _fake_pynvml(devs)
    mod.nvmlDeviceGetPowerUsage = _raiser(mod.NVMLError_NotSupported)
    be = _backend(mod)
    s = sample(be)
    d0, d1 = s.devices
    assert (d0.uuid, d0.model) == ("GPU-0", "NVIDIA H100 80GB HBM3")
    assert (d0.utilization, d0.temperature_c) == (40, 50)
    assert d0.memory_total_bytes == 80 << 30 and d0.power_watts == 0  # unsupported -> 0
    assert d0.nvlink_peers == (1,) and d1.nvlink_peers == (0,)
    assert all(d.healthy for d in s.devices) and s.topology_known
    assert s.cuda_version == "12.4"

    mod.events.append((1, 79))  # XID 79: fell off the bus
    mod.events.append((0, 13))  # application error: ignored for health
    s = sample(be)
    assert s.devices[0].healthy and not s.devices[1].healthy
    assert "79" in s.devices[1].unhealthy_reason


def test_real_backend_no_nvlink_and_lost_gpu() -> None:
    mod = _fake_pynvml([{}, {}])
    for name in ("UUID", "Name", "PciInfo", "MemoryInfo", "UtilizationRates", "Temperature",
                 "PowerUsage", "TotalEccErrors", "MigMode", "NvLinkState"):
        setattr(mod, f"nvmlDeviceGet{name}", _raiser(mod.NVMLError_NotSupported))

    def memory(h: int) -> Any:
        if h == 1:
            raise mod.NVMLError_GpuIsLost("GPU is lost")
        return types.SimpleNamespace(total=1, used=0)

    mod.nvmlDeviceGetMemoryInfo = memory
    s = sample(_backend(mod))
    assert s.devices[0].healthy and s.devices[0].nvlink_peers == ()
    assert not s.devices[1].healthy and "GPU is lost" in s.devices[1].unhealthy_reason


def _raiser(exc: type[Exception]) -> Any:
    def fn(*_a: Any) -> Any:
        raise exc("not supported")
    return fn


def test_auto_without_nvml_library_is_unavailable() -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:
        with pytest.raises(NvmlUnavailable):
            select_backend("auto")
    else:  # pragma: no cover - a GPU machine
        pytest.skip("NVML loads here")
    with pytest.raises(ValueError):
        select_backend("bogus")


def test_real_backend_reads_mig_instances() -> None:
    ns = types.SimpleNamespace
    mod = _fake_pynvml([{"UUID": "GPU-0", "MigMode": [1, 1],
                         "MemoryInfo": ns(total=80 << 30, used=0)}])
    for name in ("PciInfo", "UtilizationRates", "Temperature", "PowerUsage",
                 "TotalEccErrors", "NvLinkState"):
        setattr(mod, f"nvmlDeviceGet{name}", _raiser(mod.NVMLError_NotSupported))
    mod.NVMLError_NotFound = type("NVMLError_NotFound", (_Err,), {})
    mod.NVML_GPU_INSTANCE_PROFILE_COUNT = 3
    profiles = {0: ns(id=19, sliceCount=1, memorySizeMB=9856),
                1: ns(id=14, sliceCount=2, memorySizeMB=19968)}

    def profile_info(h: int, p: int) -> Any:
        if p not in profiles:
            raise mod.NVMLError_NotSupported("no such profile")
        return profiles[p]

    # slots 0 and 2 hold instances; 1 is empty
    migs = {0: ("MIG-a", 19, 0, 1, 9856), 2: ("MIG-b", 14, 2, 2, 19968)}

    def handle(h: int, i: int) -> Any:
        if i not in migs:
            raise mod.NVMLError_NotFound("empty")
        return ("mig", i)

    plain_uuid, plain_mem = mod.nvmlDeviceGetUUID, mod.nvmlDeviceGetMemoryInfo
    mod.nvmlDeviceGetGpuInstanceProfileInfo = profile_info
    mod.nvmlDeviceGetMaxMigDeviceCount = lambda h: 3
    mod.nvmlDeviceGetMigDeviceHandleByIndex = handle
    mod.nvmlDeviceGetGpuInstanceId = lambda mh: mh[1]
    mod.nvmlDeviceGetGpuInstanceById = lambda h, gi: gi
    mod.nvmlGpuInstanceGetInfo = lambda gi: ns(profileId=migs[gi][1], placement=ns(
        start=migs[gi][2], size=migs[gi][3]))
    mod.nvmlDeviceGetUUID = lambda h: migs[h[1]][0] if isinstance(h, tuple) else plain_uuid(h)
    mod.nvmlDeviceGetMemoryInfo = lambda h: (ns(total=migs[h[1]][4] << 20, used=0)
                                             if isinstance(h, tuple) else plain_mem(h))
    d, = sample(_backend(mod)).devices
    assert d.mig_mode
    assert [(m.uuid, m.profile, m.memory_total_bytes >> 20, m.start, m.size)
            for m in d.mig_devices] == [("MIG-a", "1g.10gb", 9856, 0, 1),
                                        ("MIG-b", "2g.20gb", 19968, 2, 2)]
    # an instance that cannot be read: none offered rather than a made-up one
    mod.nvmlGpuInstanceGetInfo = _raiser(mod.NVMLError_GpuIsLost)
    d, = sample(_backend(mod)).devices
    assert d.mig_mode and d.mig_devices == ()


def test_fixture_mig_layouts_reach_the_gpunode() -> None:
    from datetime import UTC, datetime

    from internal.agent.nvml.fixture import FixtureBackend
    from internal.agent.status import build_status

    st = build_status(sample(FixtureBackend.load("a100-mig-4")), datetime.now(UTC))
    layouts = [sorted(m["profile"] for m in d.get("migInstances") or ())
               for d in st["devices"]]
    assert layouts == [["1g.10gb"] * 7, ["2g.20gb", "2g.20gb", "3g.40gb"], [], []]
    assert all(m["uuid"].startswith("MIG-") for m in st["devices"][0]["migInstances"])
