"""The peer systems (Kueue, JobSet, LeaderWorkerSet, Kubeflow Trainer), built on demand
by ``peers.sh`` from their Go modules into the control-plane cache.

    from hack.testenv.peers import peer
    kueue = peer("kueue")      # kueue.binary, kueue.crds, kueue.webhooks

Never built by ``make testenv`` or ``make test``: a caller that needs a peer asks for
it (``make peers`` builds them all). ``TESTENV_PEERS_DIR`` points at a folder that
holds ``<name>-<version>.<os>-<arch>`` entries already built (the cache otherwise;
of several entries of one peer, the one built last: Trainer's entry of our build
around its module, ``trainer-v2.0.0+<hash>``, sorts before an older
``trainer-v2.0.0`` of the module's own manager).

Each new build removes the older builds of its peer from the cache (``prune``, run by
``peers.sh`` as ``python3 peers.py prune NAME DIR``): a new pin, or a change to
Trainer's wrapper (a new ``+<hash>``), would otherwise leave every earlier one there.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
NAMES = ("kueue", "jobset", "lws", "trainer")


@dataclass(frozen=True)
class Peer:
    name: str
    dir: Path

    @property
    def binary(self) -> Path:
        return self.dir / self.name

    @property
    def crds(self) -> list[Path]:
        return sorted((self.dir / "crd").glob("*.yaml"))

    @property
    def webhooks(self) -> Path | None:
        """Its own webhook configurations, as its module ships them (services, not URLs)."""
        path = self.dir / "webhook.yaml"
        return path if path.exists() else None

    @property
    def version(self) -> str:
        return (self.dir / "VERSION").read_text().split()[-1]


def peer(name: str) -> Peer:
    """The built peer ``name``, built first when the cache lacks it (minutes: see
    docs/testing.md for each one's first build)."""
    if name not in NAMES:
        raise ValueError(f"unknown peer {name!r}: one of {', '.join(NAMES)}")
    override = os.environ.get("TESTENV_PEERS_DIR")
    if override:
        found = list(Path(override).glob(f"{name}-v*"))
        if found:
            return Peer(name, max(found, key=lambda p: p.stat().st_mtime))
    out = subprocess.run(["bash", str(HERE / "peers.sh"), name], check=True,
                         stdout=subprocess.PIPE, text=True)
    line = out.stdout.strip().splitlines()[-1]
    got, _, path = line.partition(" ")
    if got != name:
        raise RuntimeError(f"peers.sh {name}: unexpected output {line!r}")
    return Peer(name, Path(path))


def prune(cache: Path, name: str, keep: Path) -> list[Path]:
    """Removes from ``cache`` the builds of peer ``name`` other than ``keep``, for
    ``keep``'s platform (``<name>-v<version>[+<hash>].<os>-<arch>``): an older
    version, or Trainer's build around an earlier wrapper. Another platform's,
    another peer's, and one still being built (``.tmp``) are left. Returns what it
    removed; a build it cannot remove is said on stderr and left."""
    platform = keep.name.rsplit(".", 1)[-1]
    if not cache.is_dir():
        return []
    removed = []
    for entry in sorted(cache.iterdir()):
        if (entry.name == keep.name or not entry.is_dir()
                or not entry.name.startswith(f"{name}-v")
                or not entry.name.endswith(f".{platform}")):
            continue
        try:
            shutil.rmtree(entry)
        except OSError as exc:
            print(f"testenv: could not remove the older build {entry}: {exc}", file=sys.stderr)
            continue
        print(f"testenv: removed the older build {entry}", file=sys.stderr)
        removed.append(entry)
    return removed


if __name__ == "__main__":  # peers.sh, after a build: peers.py prune NAME DIR
    if len(sys.argv) != 4 or sys.argv[1] != "prune":
        sys.exit("usage: peers.py prune NAME DIR")
    kept = Path(sys.argv[3])
    prune(kept.parent, sys.argv[2], kept)
