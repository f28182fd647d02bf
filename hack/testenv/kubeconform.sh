#!/usr/bin/env bash
# Builds kubeconform, pinned by kubeconform/go.mod beside this script, into a cache
# entry keyed by its version (as build.sh does for helm), from the Go module proxy.
# Idempotent: a second run with the same pin returns at once. Prints the binary's path
# on its last line of stdout (progress goes to stderr).
#
#   TESTENV_CACHE  where binaries are cached (default ~/.cache/gpu-orchestrator/testenv)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
ver=$(awk '$1=="github.com/yannh/kubeconform" && $2 ~ /^v/ {print $2; exit}' "$here/kubeconform/go.mod")
[ -n "$ver" ] || { echo "kubeconform.sh: cannot read the pinned version from $here/kubeconform/go.mod" >&2; exit 1; }
cache=${TESTENV_CACHE:-$HOME/.cache/gpu-orchestrator/testenv}
out="$cache/kubeconform-$ver.$(go env GOOS)-$(go env GOARCH)"
if [ ! -x "$out/kubeconform" ]; then
  t=$(date +%s)
  echo "testenv: building kubeconform $ver" >&2
  mkdir -p "$out.tmp"
  (cd "$here/kubeconform" && CGO_ENABLED=0 GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath \
    -ldflags "-s -w" -o "$out.tmp/kubeconform" github.com/yannh/kubeconform/cmd/kubeconform)
  rm -rf "$out"; mv "$out.tmp" "$out"
  echo "testenv: built kubeconform in $(( $(date +%s) - t ))s into $out" >&2
fi
echo "$out/kubeconform"
