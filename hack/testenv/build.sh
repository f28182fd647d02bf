#!/usr/bin/env bash
# Builds the real control-plane binaries pinned by the Go modules beside this
# script into a cache keyed by their versions, and helm (hack/testenv/helm) into its
# own cache entry keyed by its version, linked into the same directory as `helm`.
# Idempotent: a second run with the same pins returns at once. Prints the directory
# holding the binaries on its last line of stdout (progress goes to stderr).
#
#   TESTENV_CACHE  where binaries are cached (default ~/.cache/gpu-orchestrator/testenv,
#                  outside the work tree so fresh clones on the same machine reuse it)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

modver() { # modver DIR MODULE -> the version DIR/go.mod requires
  awk -v m="$2" '$1==m && $2 ~ /^v/ {print $2; exit} $1=="require" && $2==m {print $3; exit}' "$here/$1/go.mod"
}
k8s=$(modver kubernetes k8s.io/kubernetes)
etcd=$(modver etcd go.etcd.io/etcd/server/v3)
kwok=$(modver kwok sigs.k8s.io/kwok)
helm=$(modver helm helm.sh/helm/v3)
[ -n "$k8s" ] && [ -n "$etcd" ] && [ -n "$kwok" ] && [ -n "$helm" ] || { echo "build.sh: cannot read pinned versions from $here/*/go.mod" >&2; exit 1; }

cache=${TESTENV_CACHE:-$HOME/.cache/gpu-orchestrator/testenv}
out="$cache/k8s-$k8s.etcd-$etcd.kwok-$kwok.$(go env GOOS)-$(go env GOARCH)"
want=(kube-apiserver kube-controller-manager kube-scheduler etcd kwok)
have=1; for b in "${want[@]}"; do [ -x "$out/$b" ] || have=0; done
helm_out="$cache/helm-$helm.$(go env GOOS)-$(go env GOARCH)"
minor=${k8s#v1.}; minor=${minor%%.*}  # helm's default Kubernetes version for `helm template`
export CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false"

link_helm() { # builds helm into its own cache entry when missing; links it into $out
  if [ ! -x "$helm_out/helm" ]; then
    local t; t=$(date +%s)
    echo "testenv: building helm $helm" >&2
    mkdir -p "$helm_out.tmp"
    (cd "$here/helm" && go build -trimpath \
      -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$helm -X helm.sh/helm/v3/internal/version.gitTreeState=clean \
        -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=$minor \
        -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=$minor" \
      -o "$helm_out.tmp/helm" helm.sh/helm/v3/cmd/helm)
    rm -rf "$helm_out"; mv "$helm_out.tmp" "$helm_out"
    echo "testenv: built helm in $(( $(date +%s) - t ))s into $helm_out" >&2
  fi
  ln -sfn "$helm_out/helm" "$out/helm"
}

if [ "$have" = 1 ]; then link_helm; echo "$out"; exit 0; fi

mkdir -p "$out.tmp"
start=$(date +%s)
stamp="-s -w -X k8s.io/component-base/version.gitVersion=$k8s -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean -X k8s.io/component-base/version.buildDate=1970-01-01T00:00:00Z"

echo "testenv: building kubernetes $k8s (kube-apiserver, kube-controller-manager, kube-scheduler)" >&2
(cd "$here/kubernetes" && go build -trimpath -ldflags "$stamp" -o "$out.tmp/" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kube-scheduler)
echo "testenv: building etcd $etcd" >&2
(cd "$here/etcd" && go build -trimpath -ldflags "-s -w" -o "$out.tmp/etcd" go.etcd.io/etcd/server/v3)
echo "testenv: building kwok $kwok" >&2
(cd "$here/kwok" && go build -trimpath -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=$kwok" -o "$out.tmp/kwok" sigs.k8s.io/kwok/cmd/kwok)

rm -rf "$out"; mv "$out.tmp" "$out"
echo "testenv: built in $(( $(date +%s) - start ))s into $out" >&2
link_helm
echo "$out"
