"""The check chart takes a seed user's values file as it is: the seed's names of
values this chart spells otherwise are mapped (``gpuScheduling.schedulerName``,
``testService.logInterval``), and what has no meaning here is refused with a message
naming the chart's own values, never with the schema's bare "additional property"."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.integration.install.conftest import CHARTS, by_key, render, run_helm

# The seed's check chart values (its README's table: gpuScheduling.enabled,
# gpuScheduling.schedulerName, testService.logInterval).
SEED_VALUES = """
replicaCount: 3
image:
  repository: gpu-scheduler-check
  tag: latest
  pullPolicy: IfNotPresent
gpuScheduling:
  enabled: true
  schedulerName: my-gpu-scheduler
  schedulingMap:
    - podIndex: 0
      nodeName: "node1"
      gpuDevices: "0,1"
    - podIndex: 1
      nodeName: "node2"
      gpuDevices: "2"
    - podIndex: 2
      nodeName: "node3"
      gpuDevices: "0,1,2"
testService:
  logInterval: 7
resources:
  requests: {cpu: 50m, memory: 64Mi}
  limits: {cpu: 100m, memory: 128Mi}
"""


def _values(tmp_path: Path, text: str) -> str:
    path = tmp_path / "seed-values.yaml"
    path.write_text(text)
    return str(path)


def _fails(helm: Path, *args: str) -> str:
    proc = run_helm(helm, "template", "gpu", str(CHARTS / "gpu-scheduler-check"), *args,
                    check=False)
    assert proc.returncode != 0, proc.stdout[:500]
    return proc.stderr


def test_the_seeds_values_file_renders_with_its_names_mapped(helm: Path, tmp_path: Path) -> None:
    objs = render(helm, "gpu-scheduler-check", "-f", _values(tmp_path, SEED_VALUES))
    sts = by_key(objs)[("StatefulSet", "gpu-scheduler-check")]
    pod = sts["spec"]["template"]
    assert pod["spec"]["schedulerName"] == "my-gpu-scheduler"
    assert pod["spec"]["containers"][0]["args"] == ["--interval=7"]
    assert pod["metadata"]["annotations"]["gpu-scheduling-map"] == \
        "0=node1:0,1\n1=node2:2\n2=node3:0,1,2"


@pytest.mark.parametrize(("args", "message"), [
    (["--set", "gpuScheduling.enabled=false"],
     "gpuScheduling.enabled=false: this chart's pods are always placed by the map; "
     "to run them without it, set schedulerName: default-scheduler"),
    (["--set", "gpuScheduling.schedulerName=a", "--set", "schedulerName=b"],
     "gpuScheduling.schedulerName (the seed's name for schedulerName) is \"a\" and "
     "schedulerName is \"b\": set schedulerName only"),
    (["--set", "testService.logInterval=3", "--set", "logInterval=4"],
     "testService.logInterval (the seed's name for logInterval) is 3 and logInterval is 4: "
     "set logInterval only"),
])
def test_a_seed_value_with_no_meaning_here_is_refused_naming_the_new_one(
        helm: Path, args: list[str], message: str) -> None:
    err = _fails(helm, *args)
    assert message in err, err
