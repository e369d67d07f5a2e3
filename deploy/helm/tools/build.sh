#!/usr/bin/env bash
# Builds the helm CLI (helm.sh/helm/v4, the version go.mod pins) and
# k8scheck into .usher/bin, for tools/deploycheck's chart tests. It is a
# large build (Kubernetes' client libraries): done once, then skipped
# while go.mod, go.sum, k8scheck's sources and the Go version are the
# ones it was built from. scripts/test.sh starts it in the background at
# the beginning; the test runs it too and, through the lock, waits for
# that build instead of starting a second one.
#
# Its own module, outside go.work (GOWORK=off): helm's dependencies never
# reach the services' build, and the race-instrumented test binaries never
# compile Kubernetes.
set -euo pipefail
cd "$(dirname "$0")"
out=$(cd ../../.. && pwd)/.usher/bin
mkdir -p "$out"
exec 9>"$out/.helm-tools.lock"
flock 9
stamp=$( (go version; cat go.mod go.sum k8scheck/*.go) | sha256sum | cut -d' ' -f1)
if [ -x "$out/helm" ] && [ -x "$out/k8scheck" ] && [ "$(cat "$out/helm-tools.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
rm -f "$out/helm-tools.stamp"
GOWORK=off go build -o "$out/" helm.sh/helm/v4/cmd/helm ./k8scheck
GOWORK=off go vet ./k8scheck
echo "$stamp" >"$out/helm-tools.stamp"
