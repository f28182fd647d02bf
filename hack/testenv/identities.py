"""Who each process of the local control plane is to kube-apiserver, as kubeadm makes
them: a client certificate per component and a kubeconfig naming it.

==========================  ==================================  ======================
kubeconfig                  user (certificate CN, groups)       used by
==========================  ==================================  ======================
``kubeconfig``              ``admin`` in ``system:masters``     tests, kubectl, kwok,
                                                                the check-pod service
``kube-controller-manager`` ``system:kube-controller-manager``  kube-controller-manager
``.kubeconfig``                                                 (its own loops, and to
                                                                get its controllers'
                                                                tokens)
``kube-scheduler``          ``system:kube-scheduler``           kube-scheduler
``.kubeconfig``
==========================  ==================================  ======================

Only the admin is a cluster admin. kube-controller-manager runs with
``--use-service-account-credentials``: each of its controllers acts as its own
ServiceAccount in kube-system (``system:serviceaccount:kube-system:job-controller``,
``...:replicaset-controller``, ...), with the ``system:controller:*`` roles that
kube-apiserver bootstraps, so an admission policy that lets cluster admins through
does not let a Deployment's pods through, on this control plane as on a cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from .pki import CertificateAuthority, Pair

ADMINS_GROUP = "system:masters"


@dataclass(frozen=True)
class Identity:
    stem: str  # file names: <stem>.crt, <stem>.key, <stem>.kubeconfig
    user: str
    groups: tuple[str, ...] = ()


ADMIN = Identity("admin", "admin", (ADMINS_GROUP,))
CONTROLLER_MANAGER = Identity("kube-controller-manager", "system:kube-controller-manager")
SCHEDULER = Identity("kube-scheduler", "system:kube-scheduler")


def issue(ca: CertificateAuthority, who: Identity) -> Pair:
    """``who``'s client certificate, signed by the cluster's CA."""
    return ca.issue(who.stem, who.user, orgs=who.groups)


def kubeconfig(server: str, ca: Path, who: Identity, pair: Pair) -> dict:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": "testenv",
        "clusters": [{"name": "testenv", "cluster": {
            "server": server, "certificate-authority": str(ca)}}],
        "users": [{"name": who.stem, "user": {
            "client-certificate": str(pair.cert), "client-key": str(pair.key)}}],
        "contexts": [{"name": "testenv", "context": {
            "cluster": "testenv", "user": who.stem, "namespace": "default"}}],
    }


def write_kubeconfig(path: Path, server: str, ca: Path, who: Identity, pair: Pair) -> Path:
    path.write_text(json.dumps(kubeconfig(server, ca, who, pair), indent=2))
    return path
