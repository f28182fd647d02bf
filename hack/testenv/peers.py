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
"""

from __future__ import annotations

import os
import subprocess
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
