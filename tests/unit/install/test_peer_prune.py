"""A peer built again (a new pin, or Trainer's wrapper changed: a new
``trainer-v2.0.0+<hash>``) leaves no older build of it in the control-plane cache
(hack/testenv/peers.py ``prune``, which peers.sh runs after each build)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from hack.testenv.peers import HERE, prune

PLATFORM = "linux-amd64"


def entry(cache: Path, name: str) -> Path:
    path = cache / name
    (path / "crd").mkdir(parents=True)
    (path / "crd" / "a.yaml").write_text("kind: CustomResourceDefinition\n")
    binary = path / name.split("-v")[0]
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o555)  # as go build leaves it
    return path


def test_a_new_trainer_build_removes_the_older_ones_of_its_platform(tmp_path: Path) -> None:
    current = entry(tmp_path, f"trainer-v2.0.0+89e6611566c6.{PLATFORM}")
    older = [entry(tmp_path, f"trainer-v2.0.0+0123456789ab.{PLATFORM}"),
             entry(tmp_path, f"trainer-v2.0.0.{PLATFORM}"),  # the module's own manager
             entry(tmp_path, f"trainer-v1.9.0.{PLATFORM}")]
    kept = [entry(tmp_path, "trainer-v2.0.0+0123456789ab.linux-arm64"),  # another platform
            entry(tmp_path, f"kueue-v0.17.0.{PLATFORM}"),  # another peer
            entry(tmp_path, f"k8s-v1.34.4.etcd-v3.6.4.kwok-v0.7.0.{PLATFORM}"),
            entry(tmp_path, f"trainer-v2.0.0+fedcba987654.{PLATFORM}.tmp")]  # being built

    removed = prune(tmp_path, "trainer", current)

    assert sorted(removed) == sorted(older)
    assert sorted(p for p in tmp_path.iterdir()) == sorted([current, *kept])
    assert (current / "trainer").exists()


def test_a_lone_build_is_kept_and_a_missing_cache_is_no_error(tmp_path: Path) -> None:
    current = entry(tmp_path, f"lws-v0.9.0.{PLATFORM}")
    assert prune(tmp_path, "lws", current) == []
    assert current.exists()
    assert prune(tmp_path / "absent", "lws", tmp_path / "absent" / current.name) == []


def test_peers_sh_runs_it_as_a_script_saying_what_it_removed(tmp_path: Path) -> None:
    """The command line peers.sh calls after a build (no package import needed)."""
    current = entry(tmp_path, f"jobset-v0.12.0.{PLATFORM}")
    older = entry(tmp_path, f"jobset-v0.11.0.{PLATFORM}")
    out = subprocess.run([sys.executable, str(HERE / "peers.py"), "prune", "jobset",
                          str(current)], check=True, capture_output=True, text=True)
    assert not older.exists() and current.exists()
    assert out.stdout == ""  # peers.sh's stdout is its "NAME DIR" lines
    assert f"removed the older build {older}" in out.stderr
    assert '"$here/peers.py" prune "$name" "$out"' in (HERE / "peers.sh").read_text()
