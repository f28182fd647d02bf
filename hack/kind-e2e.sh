#!/usr/bin/env bash
# End to end on kind (needs a Docker engine, kind and kubectl):
#   1. creates the cluster of kind-config.yaml (control plane + node1..node4),
#   2. builds the controller and gpu-scheduler-check images and loads them,
#   3. deploys config/ (CRDs, RBAC, manager) and config/webhook, waits for the
#      certificate Job to have written the Secret and patched the CA bundle,
#   4. applies the seed's StatefulSet (config/samples/gpu-scheduler-check-statefulset.yaml),
#   5. saves `kubectl get pod -owide -A` and the logs of the pods on node3 and node4
#      into $ARTIFACTS, and checks each replica's node and CUDA_VISIBLE_DEVICES.
#
#   ARTIFACTS     where to save (default tests/artifacts/kind)
#   KIND_CLUSTER  cluster name (default gpu-orchestrator-e2e); reused if it exists
#   KEEP_CLUSTER  1: leave the cluster running afterwards (default: delete it if
#                 this script created it)
#   TIMEOUT       seconds to wait for the pods (default 300)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
cluster=${KIND_CLUSTER:-gpu-orchestrator-e2e}
artifacts=${ARTIFACTS:-$root/tests/artifacts/kind}
timeout=${TIMEOUT:-300}
ns=gpu-check
ctx="kind-$cluster"
k() { kubectl --context "$ctx" "$@"; }
log() { echo "kind-e2e: $*" >&2; }

for tool in docker kind kubectl; do
  command -v "$tool" >/dev/null || { log "$tool not found"; exit 2; }
done
docker info >/dev/null 2>&1 || { log "no Docker engine (docker info failed)"; exit 2; }
mkdir -p "$artifacts"

created=0
if ! kind get clusters 2>/dev/null | grep -qx "$cluster"; then
  log "creating cluster $cluster"
  kind create cluster --name "$cluster" --config kind-config.yaml --wait 180s
  created=1
fi

collect() {
  log "saving artifacts to $artifacts"
  k get pod -owide -A >"$artifacts/pods-wide.txt" 2>&1 || true
  k get nodes -owide --show-labels >"$artifacts/nodes.txt" 2>&1 || true
  k get events -A --sort-by=.lastTimestamp >"$artifacts/events.txt" 2>&1 || true
  k -n gpu-orchestrator-system logs deploy/gpu-orchestrator-webhook >"$artifacts/webhook.log" 2>&1 || true
  k -n gpu-orchestrator-system logs deploy/gpu-orchestrator-manager >"$artifacts/manager.log" 2>&1 || true
  for node in node3 node4; do
    for pod in $(k -n "$ns" get pod --field-selector "spec.nodeName=$node" -o name 2>/dev/null); do
      k -n "$ns" logs "$pod" >"$artifacts/${node}_${pod#pod/}.log" 2>&1 || true
    done
  done
  if [ "$created" = 1 ] && [ "${KEEP_CLUSTER:-0}" != 1 ]; then
    log "deleting cluster $cluster"
    kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
  fi
}
trap collect EXIT

names=$(k get nodes -l gpu.orchestrator.dev/node-alias -o jsonpath='{.items[*].metadata.name}')
for want in node1 node2 node3 node4; do
  case " $names " in *" $want "*) ;; *)
    log "worker Node objects are named '$names', not node1..node4: this kind version"
    log "ignores nodeRegistration.name in kind-config.yaml; the map cannot match"
    exit 1 ;;
  esac
done

log "building images"
docker build -q -t gpu-orchestrator:0.1.0 -f Dockerfile . >/dev/null
docker build -q -t gpu-scheduler-check:0.1.0 -f Dockerfile.check . >/dev/null
kind load docker-image --name "$cluster" gpu-orchestrator:0.1.0 gpu-scheduler-check:0.1.0

log "deploying config/ and config/webhook"
k apply -k config >/dev/null
k apply -k config/webhook >/dev/null
k -n gpu-orchestrator-system wait --for=condition=complete job/gpu-orchestrator-webhook-certs \
  --timeout=180s
k -n gpu-orchestrator-system rollout status deploy/gpu-orchestrator-webhook --timeout=180s
k -n gpu-orchestrator-system rollout status deploy/gpu-orchestrator-manager --timeout=180s
deadline=$((SECONDS + 60))
until [ -n "$(k get mutatingwebhookconfiguration gpu-orchestrator-mutating-webhook \
      -o jsonpath='{.webhooks[0].clientConfig.caBundle}')" ]; do
  [ $SECONDS -lt $deadline ] || { log "the certificate Job did not patch the CA bundle"; exit 1; }
  sleep 2
done

log "applying the gpu-scheduler-check StatefulSet"
k create namespace "$ns" --dry-run=client -o yaml | k apply -f - >/dev/null
k -n "$ns" apply -f config/samples/gpu-scheduler-check-statefulset.yaml >/dev/null
deadline=$((SECONDS + timeout))
until [ "$(k -n "$ns" get pod -l app=gpu-scheduler-check \
      --field-selector=status.phase=Running -o name | wc -l)" -eq 5 ]; do
  [ $SECONDS -lt $deadline ] || { log "the 5 pods were not Running within ${timeout}s"; exit 1; }
  sleep 3
done

log "checking placements"
fail=0
: >"$artifacts/placements.txt"
expect=("node1 0,1" "node2 2" "node3 0,1,2" "node4 3" "node4 3")
for i in 0 1 2 3 4; do
  read -r want_node want_devs <<<"${expect[$i]}"
  pod=gpu-scheduler-check-$i
  node=$(k -n "$ns" get pod "$pod" -o jsonpath='{.spec.nodeName}')
  devs=$(k -n "$ns" get pod "$pod" \
    -o jsonpath='{.spec.containers[0].env[?(@.name=="CUDA_VISIBLE_DEVICES")].value}')
  echo "$pod node=$node CUDA_VISIBLE_DEVICES=$devs" | tee -a "$artifacts/placements.txt"
  if [ "$node" != "$want_node" ] || [ "$devs" != "$want_devs" ]; then
    log "$pod: want node=$want_node CUDA_VISIBLE_DEVICES=$want_devs"; fail=1
  fi
  # The probe itself logs what it sees.
  seen=0
  for _ in $(seq 30); do
    if k -n "$ns" logs "$pod" 2>/dev/null \
        | grep -q "node=$want_node .*CUDA_VISIBLE_DEVICES=$want_devs "; then seen=1; break; fi
    sleep 1
  done
  if [ "$seen" != 1 ]; then
    log "$pod: its log does not show node=$want_node CUDA_VISIBLE_DEVICES=$want_devs"; fail=1
  fi
done
exit $fail
