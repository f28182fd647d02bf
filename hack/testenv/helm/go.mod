// helm: the tests lint, render and install charts/ with it.
// Built by hack/testenv/build.sh into its own cache entry; never imported.
module github.com/gpu-orchestrator/testenv/helm

go 1.24.0

tool helm.sh/helm/v3/cmd/helm

require helm.sh/helm/v3 v3.19.5
