"""The names every part of gpu-orchestrator agrees on: the extended resource, our
labels and annotations, and the finalizer. Plain strings, no imports, so any layer
(api, scheduling, controllers, webhook, agent, cli) may use them."""

GROUP = "gpu.orchestrator.dev"

#: the NVIDIA device plugin's extended resource
GPU_RESOURCE = "nvidia.com/gpu"

#: the seed's scheduling map: on a seed-path pod (a StatefulSet's), the map its replica
#: index picks its node and devices from; on a GPUWorkload, used when
#: ``spec.schedulingMap`` is unset
SCHEDULING_MAP_ANNOTATION = "gpu-scheduling-map"

#: on a child: the name of the GPUWorkload it belongs to (informational; ownership is
#: the controller ownerReference, never this label); ``status.selector`` selects on it
WORKLOAD_LABEL = f"{GROUP}/workload"
#: on a child (and a Job's pod template): the UID of its GPUWorkload
WORKLOAD_UID_LABEL = f"{GROUP}/workload-uid"
#: on a child: the replica index
INDEX_LABEL = f"{GROUP}/replica-index"
#: on a child: the attempt (the workload's ``status.retries`` when it was created)
ATTEMPT_LABEL = f"{GROUP}/attempt"

#: on a child: a hash of the spec it was made from (template, replicas); a child
#: whose hash differs from the spec's is restarted onto a new placement
SPEC_HASH_ANNOTATION = f"{GROUP}/spec-hash"

#: on a pod: the host device indices it holds (``"0,1"``); written by the controller,
#: the webhook and the pod binding
DEVICES_ANNOTATION = f"{GROUP}/devices"
#: a pod group member's record of its group's other slots (the devices reserved for a
#: leader's workers, and every other member's), written by the pod binding's Binding
#: (controllers/podbinding/seedentry.py); booked again on a restart
GROUP_SLOTS_ANNOTATION = f"{GROUP}/group-slots"
#: the downward-API path of that annotation: a pod group's member reads its
#: ``CUDA_VISIBLE_DEVICES`` from it (docs/podgroups.md)
DEVICES_FIELD_PATH = f"metadata.annotations['{DEVICES_ANNOTATION}']"
#: on a pod the pod binding binds: its devices' UUIDs (``"GPU-ab..,GPU-cd.."``, in the
#: order of the devices annotation; the host indices where the node's UUIDs are
#: unknown), written by the Binding only for a pod that reads it (below)
DEVICE_UUIDS_ANNOTATION = f"{GROUP}/device-uuids"
#: the downward-API path of that annotation: a pod group's member in
#: ``nvidia-visible-devices`` mode reads its ``NVIDIA_VISIBLE_DEVICES`` from it
DEVICE_UUIDS_FIELD_PATH = f"metadata.annotations['{DEVICE_UUIDS_ANNOTATION}']"
#: on a pod beside the devices annotation: its share of its one device
#: (``memory=20480Mi`` or ``fraction=0.25``), or the MIG instance it holds (``MIG-<uuid>``)
SHARE_ANNOTATION = f"{GROUP}/share"
MIG_ANNOTATION = f"{GROUP}/mig"
#: on a child and on a ResourceClaim of ours: the node of its placement
NODE_ANNOTATION = f"{GROUP}/node"
#: on a child: the exposure mode it was made with (a manager restarted in another
#: mode leaves it running as it is: controllers/gpuworkload/unmanaged.py)
EXPOSURE_ANNOTATION = f"{GROUP}/exposure"
#: on a seed-path pod: the exposure mode it asks the webhook for (else the webhook's
#: ``--device-exposure``); not the child's ``EXPOSURE_ANNOTATION`` above
REQUESTED_EXPOSURE_ANNOTATION = f"{GROUP}/device-exposure"

#: on a GPUWorkload: its children are deleted by the controller, and the object goes
#: only once they are gone
CHILDREN_FINALIZER = f"{GROUP}/children"
#: on a ResourceClaim the controller made (``deviceExposure: dra``): the claim stays
#: until no pod uses it and its allocation is removed (a claim must not vanish under
#: a live pod)
CLAIM_FINALIZER = f"{GROUP}/claim-in-use"
#: on a pod group member's ResourceClaim the pod binding allocated (a ``dra``
#: member's): its group's ledger key (``PodGroup:<ns>/<group>``), so the ledger holds
#: the claim's devices as its group's (``resourceslices.claim_owner``)
GROUP_CLAIM_ANNOTATION = f"{GROUP}/pod-group-holder"

#: on a Namespace, written only by the manager (the ``queue-namespace-marks`` policy):
#: ``"true"`` while a GPUQueue selects it. The queues' admission policies match only
#: namespaces carrying it (their ``namespaceSelector``), so they need no GPUQueue params
QUEUED_LABEL = f"{GROUP}/queued"
#: beside it: every GPUQueue that selects the namespace, by name, comma-separated (the
#: first is the default queue of its workloads); an annotation, for a queue's name may
#: be longer than a label's value
QUEUES_ANNOTATION = f"{GROUP}/queues"

#: on a Node: which authority hands out its GPUs' identity (docs/install.md, one
#: authority per node): ``named`` (the ledger names every device; no device-plugin
#: allocation there), ``counted`` (the device plugin picks; the ledger only counts) or
#: ``dra`` (ResourceClaims hold every device). Also the key of the ``NoSchedule`` taint
#: that keeps other schedulers off a named node (value ``named``), which our
#: placements and ``gpu-scheduler`` pods tolerate
DEVICE_AUTHORITY_LABEL = f"{GROUP}/device-authority"
#: on a Namespace: ``gpu-scheduler`` routes its pods that ask for ``nvidia.com/gpu`` to
#: gpu-scheduler (the webhook sets their ``schedulerName``)
SCHEDULER_ROUTE_LABEL = f"{GROUP}/scheduler"

#: on a pod: the name of the group it is placed with, all or nothing
#: (docs/podgroups.md); every member carries it and the size annotation below
POD_GROUP_LABEL = f"{GROUP}/pod-group"
#: beside it: how many members the group needs before any of them is placed
POD_GROUP_SIZE_ANNOTATION = f"{GROUP}/pod-group-size"
