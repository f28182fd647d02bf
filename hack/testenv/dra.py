"""What the NVIDIA DRA driver would publish, for tests and the demo (no driver runs
on kwok nodes): one ResourceSlice per node, pool named after the node, devices
``gpu-<minor>`` with the attributes and capacity the driver sets, and its
DeviceClass."""

from __future__ import annotations

from typing import Any

DRA = "resource.k8s.io/v1"
DRIVER = "gpu.nvidia.com"


def nvidia_slice(node: str, gpus: int, model: str = "NVIDIA A100-SXM4-80GB",
                 memory: str = "80Gi") -> dict[str, Any]:
    return {
        "apiVersion": DRA, "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{
                "name": f"gpu-{i}",
                "attributes": {
                    "type": {"string": "gpu"}, "uuid": {"string": f"GPU-{node}-{i}"},
                    "productName": {"string": model},
                    "minor": {"int": i}, "index": {"int": i},
                    "pciBusID": {"string": f"0000:{i + 7:02x}:00.0"},
                },
                "capacity": {"memory": {"value": memory}},
            } for i in range(gpus)],
        },
    }


def device_class() -> dict[str, Any]:
    return {"apiVersion": DRA, "kind": "DeviceClass", "metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}}
