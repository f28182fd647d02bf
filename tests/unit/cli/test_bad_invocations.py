"""`kubectl gpu` refuses nonsense before any request: every bad invocation below
ends with one line on stderr, ``error: ...``, saying what is wrong, nothing on
stdout, and its exit code (2 usage, 1 a file that cannot be used, 3 a kubeconfig
that cannot be used or a cluster that cannot be reached).

The kubeconfig in ``$KUBECONFIG`` points at a closed port of 127.0.0.1: an
invocation that slipped through the checks would end with "cannot reach" instead."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from internal.cli.main import main

USAGE, FILE, KUBECONFIG = 2, 1, 3


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(autouse=True)
def files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    kc = {"apiVersion": "v1", "kind": "Config", "current-context": "c",
          "clusters": [{"name": "k", "cluster": {
              "server": f"https://127.0.0.1:{closed_port()}",
              "insecure-skip-tls-verify": True}}],
          "users": [{"name": "u", "user": {"token": "t"}}],
          "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}
    (tmp_path / "kubeconfig").write_text(yaml.safe_dump(kc))
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    (tmp_path / "bad.yaml").write_text("a: [1,\n")
    (tmp_path / "string.yaml").write_text("just a sentence\n")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "pod.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n")
    (tmp_path / "big.yaml").write_text(
        "apiVersion: gpu.orchestrator.dev/v1alpha1\nkind: GPUWorkload\n"
        "metadata: {name: big}\nspec: {gpusPerReplica: 100}\n")
    (tmp_path / "noname.yaml").write_text(
        "apiVersion: gpu.orchestrator.dev/v1alpha1\nkind: GPUWorkload\nspec: {}\n")
    (tmp_path / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)))
    for name, spec in ((n, dict(s)) for n, s in SPECS.items()):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(
            {"apiVersion": "gpu.orchestrator.dev/v1alpha1", "kind": "GPUWorkload",
             "metadata": {"name": spec.pop("name", "w"), "namespace": spec.pop("ns", None)},
             "spec": spec}))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _pod(image: str) -> dict:
    return {"spec": {"containers": [{"name": "main", "image": image}]}}


#: submit's files: each breaks one rule the API (CRD, admission policy or the
#: controller's map check) would apply
SPECS: dict[str, dict] = {
    "gang1abc": {"name": "1abc", "replicas": 2},
    "partialmap": {"replicas": 2, "schedulingStrategy": "annotationMap",
                   "schedulingMap": "0=n1:0"},
    "mapnode": {"schedulingStrategy": "annotationMap", "schedulingMap": "0=Node_1:0"},
    "mapdevice": {"schedulingStrategy": "annotationMap", "schedulingMap": "0=n1:99999999999"},
    "imageupper": {"template": _pod("Foo:Bar")},
    "imageempty": {"template": _pod("")},
    "nsa": {"ns": "a"},
}

CASES: list[tuple[str, str, int]] = [
    # template
    ("template --replicas 0", "argument --replicas: must be from 1 to 512, got 0", USAGE),
    ("template --replicas -1", "argument --replicas: must be from 1 to 512, got -1", USAGE),
    ("template --replicas 1001", "must be from 1 to 512, got 1001", USAGE),
    ("template --replicas 600", "argument --replicas: must be from 1 to 512, got 600", USAGE),
    ("template --name 1abc --replicas 2", "--name '1abc' cannot name a gang", USAGE),
    ("template --strategy annotationMap --map 0=Node_1:0",
     "--map: line 1 '0=Node_1:0': node name 'Node_1' is not a valid DNS-1123 subdomain",
     USAGE),
    ("template --strategy annotationMap --map 0=n1:99999999999",
     "--map: line 1 '0=n1:99999999999': device index 99999999999 is above 999", USAGE),
    ("template --image Foo:Bar", "argument --image: image 'Foo:Bar' is not a valid image "
                                 "reference", USAGE),
    ('template --image ""', "argument --image: image '\"\"' is not a valid image reference",
     USAGE),
    ("template --replicas two", "argument --replicas: invalid integer 'two'", USAGE),
    ("template --gpus 0", "argument --gpus: must be from 1 to 64, got 0", USAGE),
    ("template --gpus 100", "argument --gpus: must be from 1 to 64, got 100", USAGE),
    ("template --gpus 1.5", "argument --gpus: invalid integer '1.5'", USAGE),
    ("template --name Bad_Name", "name 'Bad_Name' is not a valid DNS-1123 label", USAGE),
    ("template --name=-abc", "name '-abc' is not a valid DNS-1123 label", USAGE),
    ("template --name " + "a" * 60, "is longer than 59 characters", USAGE),
    ("template --name=", "argument --name: name must not be empty", USAGE),
    ("template --image=", "argument --image: the image must not be empty", USAGE),
    ("template --image=a\tb", "image 'a\\tb' contains whitespace", USAGE),
    ("template --strategy annotationMap", "--strategy annotationMap needs --map", USAGE),
    ("template --strategy fastest", "argument --strategy: invalid choice: 'fastest'", USAGE),
    ("template --map 0=n1:0", "--map is only read by --strategy annotationMap", USAGE),
    ("template --strategy annotationMap --map nonsense", "--map: ", USAGE),
    ("template --strategy annotationMap --replicas 2 --map 0=n1:0",
     "--map: no map entry for replica(s) 1", USAGE),
    ("template -A", "template works on one namespace: -A/--all-namespaces is not supported",
     USAGE),
    # watch
    ("watch --timeout -1", "argument --timeout: must not be negative, got '-1'", USAGE),
    ("watch --timeout soon", "argument --timeout: invalid duration 'soon'", USAGE),
    ("watch --timeout 5parsecs", "invalid duration '5parsecs'", USAGE),
    ("watch --timeout 100000000000000h", "argument --timeout: must be at most 2562047h", USAGE),
    # global flags
    ("-n Bad_NS status", "namespace 'Bad_NS' is not a valid DNS-1123 label", USAGE),
    ("-n= status", "argument -n/--namespace: namespace must not be empty", USAGE),
    ("status -n " + "a" * 64, "is longer than 63 characters", USAGE),
    ("status -n team -A", "use either -n/--namespace or -A/--all-namespaces, not both", USAGE),
    ("status -o xml", "argument -o/--output: invalid choice: 'xml'", USAGE),
    ("status --request-timeout 0x", "argument --request-timeout: invalid duration '0x'", USAGE),
    ("status --request-timeout -5", "argument --request-timeout: must not be negative", USAGE),
    ("status --request-timeout=", "argument --request-timeout: invalid duration ''", USAGE),
    ("status --request-timeout nan", "invalid duration 'nan'", USAGE),
    ("status --request-timeout 100000000000000h",
     "argument --request-timeout: must be at most 2562047h (the longest duration kubectl "
     "reads), got '100000000000000h'", USAGE),
    ("status --request-timeout 1e300", "must be at most 2562047h", USAGE),
    ("nodes --gpunode-stale-after 100000000000000h", "must be at most 2562047h", USAGE),
    ("status --as-group admins", "--as-group needs --as USER", USAGE),
    ("status --as=", "argument --as: --as must not be empty", USAGE),
    ("status --context=", "argument --context: --context must not be empty", USAGE),
    ("status --kubeconfig=", "argument --kubeconfig: --kubeconfig must not be empty", USAGE),
    ("", "a command is required: status, nodes, workloads", USAGE),
    ("bogus", "argument COMMAND: invalid choice: 'bogus'", USAGE),
    ("status --bogus", "unrecognized arguments: --bogus", USAGE),
    # describe
    ("describe -A train", "describe works on one namespace: -A/--all-namespaces is not "
                          "supported here (use -n NAMESPACE)", USAGE),
    ("describe", "the following arguments are required: workload", USAGE),
    ("describe train --events -5", "argument --events: must be at least 0, got -5", USAGE),
    ("describe train --events many", "argument --events: invalid integer 'many'", USAGE),
    ("describe Bad_Name", "workload name 'Bad_Name' is not a valid DNS-1123 subdomain", USAGE),
    # nodes, status, workloads
    ("nodes --gpunode-stale-after -5", "argument --gpunode-stale-after: must not be negative",
     USAGE),
    ("nodes --gpunode-stale-after 0", "argument --gpunode-stale-after: must be more than 0",
     USAGE),
    ("status --gpunode-stale-after 1y", "invalid duration '1y'", USAGE),
    ("nodes Bad_Node", "node name 'Bad_Node' is not a valid DNS-1123 subdomain", USAGE),
    ("nodes --dra-driver=", "argument --dra-driver: --dra-driver must not be empty", USAGE),
    ("workloads Bad_Name", "workload name 'Bad_Name' is not a valid DNS-1123 subdomain",
     USAGE),
    # submit: the file is read and checked before any request
    ("submit", "the following arguments are required: file", USAGE),
    ("submit -A empty.yaml", "submit works on one namespace", USAGE),
    ("submit missing.yaml", "cannot read missing.yaml: No such file or directory", FILE),
    ("submit bad.yaml", "bad.yaml is not valid YAML: line 2, column 1: expected the node "
                        "content, but found '<stream end>'", FILE),
    ("submit string.yaml", "string.yaml (document 1): not an object", FILE),
    ("submit empty.yaml", "empty.yaml holds no object", FILE),
    ("submit pod.yaml", "expected apiVersion gpu.orchestrator.dev/v1alpha1, kind GPUWorkload; "
                        "got v1, Pod", FILE),
    ("submit noname.yaml", "noname.yaml (document 1): metadata.name is required", FILE),
    ("submit big.yaml", "big.yaml (document 1): invalid GPUWorkload:; spec.gpusPerReplica", FILE),
    ("submit binary.bin", "binary.bin is not a YAML or JSON file: not UTF-8 text (byte 0x80 "
                          "at offset 128)", FILE),
    ("submit gang1abc.yaml", "gang1abc.yaml (document 1): metadata.name 1abc cannot name a "
                             "gang", FILE),
    ("submit partialmap.yaml", "partialmap.yaml (document 1): spec.schedulingMap: no map "
                               "entry for replica(s) 1", FILE),
    ("submit mapnode.yaml", "mapnode.yaml (document 1): spec.schedulingMap: line 1 "
                            "'0=Node_1:0': node name 'Node_1' is not a valid", FILE),
    ("submit mapdevice.yaml", "device index 99999999999 is above 999", FILE),
    ("submit imageupper.yaml", "imageupper.yaml (document 1): spec.template.spec.containers"
                               "[0].image: image 'Foo:Bar' is not a valid image reference",
     FILE),
    ("submit imageempty.yaml", "spec.template.spec.containers[0].image: every container "
                               "needs an image", FILE),
    ("-n b submit nsa.yaml", 'the namespace from the provided object "a" does not match the '
                             'namespace "b". You must pass \'--namespace=a\' to perform '
                             'this operation.', FILE),
    # kubeconfig
    ("status --kubeconfig passwd", "cannot load kubeconfig: passwd: not a kubeconfig "
                                   "(expected a YAML mapping with clusters, users and contexts)",
     KUBECONFIG),
    ("status --kubeconfig /etc/passwd", "/etc/passwd: not a kubeconfig", KUBECONFIG),
    ("status --kubeconfig nothing-here", "cannot load kubeconfig: nothing-here: no such file",
     KUBECONFIG),
    ("status --kubeconfig .", "cannot load kubeconfig: .: is a directory", KUBECONFIG),
    ("status --context elsewhere", "context 'elsewhere' not found in", KUBECONFIG),
    ("nodes --kubeconfig bad.yaml", "bad.yaml: not valid YAML (line 2)", KUBECONFIG),
]


def test_there_are_forty_and_more() -> None:
    assert len(CASES) >= 40


@pytest.mark.parametrize(("argv", "message", "code"), CASES,
                         ids=[c[0] or "<none>" for c in CASES])
def test_bad_invocation(argv: str, message: str, code: int,
                        capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(argv.split(" ") if argv else [])
    out, err = capsys.readouterr()
    assert (rc, out) == (code, ""), err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert message in err, err
    assert "cannot reach" not in err, "checked before any request"


def test_an_unreachable_cluster_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    """No retry log lines first: the client's logging is silenced."""
    assert main(["status"]) == 3
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1, err
    assert err.startswith("error: cannot reach the Kubernetes API server at https://127.0.0.1:")
    assert err.rstrip().endswith("is the cluster running, and does your kubeconfig point at it?")


@pytest.mark.parametrize(("text", "seconds"), [
    ("0", 0.0), ("20", 20.0), ("1.5", 1.5), ("30s", 30.0), ("1m", 60.0), ("1h30m", 5400.0),
    ("500ms", 0.5), ("2m30s", 150.0)])
def test_durations_as_kubectl_reads_them(text: str, seconds: float) -> None:
    from internal.cli.validate import duration

    assert duration(text) == seconds
