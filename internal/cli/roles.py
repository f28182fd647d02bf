"""Which role opens which view: a refusal of the API server becomes one line naming
the role to ask for (docs/usage.md, "Roles").

=====================================  =============================================
refused                                the line names
=====================================  =============================================
a cluster-scoped read (Nodes,          ``gpu-orchestrator-viewer``, bound with a
GPUNodes, GPUQueues, ResourceSlices)   ClusterRoleBinding (config/rbac/user_roles.yaml)
a read in every namespace (``-A``)     ``view`` (or ``gpuworkload-viewer``), bound
                                       with a ClusterRoleBinding
a read in one namespace                ``view`` (or ``gpuworkload-viewer``), bound
                                       there with a RoleBinding
a create (``submit``)                  ``edit`` (or ``gpuworkload-editor``), bound
                                       there with a RoleBinding
=====================================  =============================================
"""

from __future__ import annotations

from internal.cli.kube import Forbidden

VIEWER = "gpu-orchestrator-viewer"
#: the cluster-scoped kinds the views read, all granted by VIEWER
CLUSTER_KINDS = frozenset({"Node", "GPUNode", "GPUQueue", "ResourceSlice"})


def needs(e: Forbidden, command: str) -> str:
    """The one line for a refusal met by ``kubectl gpu <command>``."""
    if e.kind is None:
        return e.message
    if e.kind in CLUSTER_KINDS:
        role = f"the ClusterRole {VIEWER}, bound to you with a ClusterRoleBinding"
    elif e.verb == "create":
        role = (f"the ClusterRole edit (or gpuworkload-editor) bound in namespace "
                f"{e.namespace} with a RoleBinding")
    elif e.namespace is None:
        role = ("the ClusterRole view (or gpuworkload-viewer) bound with a "
                "ClusterRoleBinding, to read every namespace")
    else:
        role = (f"the ClusterRole view (or gpuworkload-viewer) bound in namespace "
                f"{e.namespace} with a RoleBinding")
    return f"kubectl gpu {command} needs {role}: {e.reason}"
