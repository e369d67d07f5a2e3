#!/usr/bin/env bash
# Builds the helm CLI (helm.sh/helm/v4, the version go.mod pins), k8scheck
# and envoycheck into .usher/bin, for tools/deploycheck's chart and proxy
# snippet tests. It is a large build (Kubernetes' client libraries,
# Envoy's API): done once per machine (kept in the user's cache), then
# skipped while go.mod, go.sum, k8scheck's and envoycheck's sources and the
# Go version are the ones it was built from. scripts/test.sh starts it in
# the background at the beginning; the test runs it too and, through the
# lock, waits for that build instead of starting a second one.
#
# Its own module, outside go.work (GOWORK=off): helm's dependencies never
# reach the services' build, and the race-instrumented test binaries never
# compile Kubernetes or Envoy's API.
set -euo pipefail
cd "$(dirname "$0")"
out=$(cd ../../.. && pwd)/.usher/bin
mkdir -p "$out"
exec 9>"$out/.helm-tools.lock"
flock 9
stamp=$( (go version; cat go.mod go.sum k8scheck/*.go envoycheck/*.go) | sha256sum | cut -d' ' -f1)
if [ -x "$out/helm" ] && [ -x "$out/k8scheck" ] && [ -x "$out/envoycheck" ] && [ "$(cat "$out/helm-tools.stamp" 2>/dev/null)" = "$stamp" ]; then
  exit 0
fi
# Built once per machine: a fresh clone (CI's) finds the binaries of the
# same stamp in the user's cache and copies them instead of linking two
# large binaries again.
cache=${XDG_CACHE_HOME:-$HOME/.cache}/usher/helm-tools/$stamp
rm -f "$out/helm-tools.stamp"
if ! [ -x "$cache/helm" ] || ! [ -x "$cache/k8scheck" ] || ! [ -x "$cache/envoycheck" ]; then
  mkdir -p "$cache.tmp.$$"
  GOWORK=off go build -o "$cache.tmp.$$/" helm.sh/helm/v4/cmd/helm ./k8scheck ./envoycheck
  GOWORK=off go vet ./k8scheck ./envoycheck
  rm -rf "$cache"
  mv "$cache.tmp.$$" "$cache"
fi
cp "$cache/helm" "$cache/k8scheck" "$cache/envoycheck" "$out/"
echo "$stamp" >"$out/helm-tools.stamp"
