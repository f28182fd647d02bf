#!/usr/bin/env bash
# Builds the peer systems that the benchmark runs beside ours (and that tests of other
# controllers' pod groups may start), each from its own Go module at the version
# pinned below, into a cache entry keyed by name and version, as build.sh does for
# the control plane. Only on demand (`make peers`, hack.testenv.peers.peer()): never
# part of `make testenv` or of `make test`.
#
#   bash hack/testenv/peers.sh [kueue|jobset|lws|trainer ...]   (default: kueue)
#
# Each entry holds the controller binary (its package built inside the module's own
# source as `go mod download -json` unpacks it, so with the module's go.mod and
# go.sum), crd/ (the CRDs from the same source) and webhook.yaml (its webhook
# configurations, as its kustomize base ships them). A peer whose package is "@DIR"
# is built from hack/testenv/DIR instead: a main of ours around the module's packages
# (Kubeflow Trainer: upstream's manager with its webhook server on 127.0.0.1 and a
# given certificate, see trainer/main.go), whose go.mod must require the pinned
# version; its entry's name carries a hash of that folder (trainer-v2.0.0+<hash>), so
# a change to it rebuilds. A build removes the older builds of its peer from the cache
# (peers.py prune: an earlier pin, or trainer-v2.0.0+<an earlier hash>). Idempotent: a
# second run with the same pins returns at once.
# Prints one line per peer on stdout, "NAME DIR" (progress and each build's time go
# to stderr).
#
#   TESTENV_CACHE  where binaries are cached (default ~/.cache/gpu-orchestrator/testenv)
set -euo pipefail

# name -> module, version, package to build (relative to the module; "@DIR": ours,
# hack/testenv/DIR), its CRD folder, and its webhook configurations (copied as
# webhook.yaml; "-": none copied)
pins() {
  case "$1" in
    kueue)   echo "sigs.k8s.io/kueue v0.17.0 cmd/kueue config/components/crd/bases config/components/webhook/manifests.yaml" ;;
    jobset)  echo "sigs.k8s.io/jobset v0.12.0 . config/components/crd/bases config/components/webhook/manifests.yaml" ;;
    lws)     echo "sigs.k8s.io/lws v0.9.0 cmd config/crd/bases config/webhook/manifests.yaml" ;;
    trainer) echo "github.com/kubeflow/trainer/v2 v2.0.0 @trainer manifests/base/crds manifests/base/webhook/manifests.yaml" ;;
    *) echo "peers.sh: unknown peer $1 (kueue, jobset, lws, trainer)" >&2; return 1 ;;
  esac
}

here=$(cd "$(dirname "$0")" && pwd)
cache=${TESTENV_CACHE:-$HOME/.cache/gpu-orchestrator/testenv}
platform="$(go env GOOS)-$(go env GOARCH)"
export CGO_ENABLED=0 GOFLAGS="-buildvcs=false" GOTOOLCHAIN=local

build() { # build NAME -> prints "NAME DIR"
  local name=$1 module version pkg crds hooks out t src
  read -r module version pkg crds hooks < <(pins "$name")
  local wrap="" tag=""
  if [ "${pkg#@}" != "$pkg" ]; then
    wrap="$here/${pkg#@}"
    awk -v m="$module" -v v="$version" '$1==m && $2==v {found=1} $1=="require" && $2==m && $3==v {found=1} END {exit !found}' \
      "$wrap/go.mod" || { echo "peers.sh: $wrap/go.mod does not require $module $version" >&2; return 1; }
    tag="+$(cat "$wrap/go.mod" "$wrap/go.sum" "$wrap"/*.go | sha256sum | cut -c1-12)"
  fi
  out="$cache/$name-$version$tag.$platform"
  if [ ! -x "$out/$name" ] || [ ! -d "$out/crd" ] || { [ "$hooks" != "-" ] && [ ! -f "$out/webhook.yaml" ]; }; then
    t=$(date +%s)
    echo "testenv: building $name $version ($module)" >&2
    rm -rf "$out.tmp"; mkdir -p "$out.tmp/crd"
    # the module's source, then its package built in it as the main module: its own
    # go.mod and go.sum, as `go install MODULE/PKG@VERSION` would (which also asks the
    # proxy for the module's version list, refused by some proxies for some modules)
    src=$(go mod download -json "$module@$version" | awk -F'"' '$2=="Dir" {print $4}')
    [ -d "$src" ] || { echo "peers.sh: go mod download $module@$version gave no source" >&2; return 1; }
    if [ -n "$wrap" ]; then
      (cd "$wrap" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "-s -w" \
        -o "$out.tmp/$name" .)
    else
      (cd "$src" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags "-s -w" \
        -o "$out.tmp/$name" "./$pkg")
    fi
    [ -d "$src/$crds" ] || { echo "peers.sh: no $crds in $src" >&2; return 1; }
    find "$src/$crds" -maxdepth 1 -name '*.yaml' ! -name kustomization.yaml \
      -exec cp {} "$out.tmp/crd/" \;
    if [ "$hooks" != "-" ] && [ -f "$src/$hooks" ]; then cp "$src/$hooks" "$out.tmp/webhook.yaml"; fi
    chmod -R u+w "$out.tmp"
    echo "$module $version" > "$out.tmp/VERSION"
    rm -rf "$out"; mv "$out.tmp" "$out"
    echo "testenv: built $name $version in $(( $(date +%s) - t ))s into $out" >&2
    # the older builds of this peer (an earlier pin, or Trainer's earlier wrapper) go
    python3 "$here/peers.py" prune "$name" "$out" >&2 || true
  fi
  echo "$name $out"
}

[ $# -gt 0 ] || set -- kueue
for name in "$@"; do build "$name"; done
