// Package deploycheck checks the deployment files against the code: a
// variable that compose.yaml or the Helm chart sets and no service reads
// is a silent misconfiguration; each service must connect to Redis and
// PostgreSQL as its own user and role; the chart's rendered manifests
// must be valid Kubernetes objects (helm and k8scheck, built from
// deploy/helm/tools) that probe the services where they answer and mount
// their secrets where they read them; docs/integration.md's Envoy filters
// must decode strictly into Envoy's v3 API types (envoycheck, from the
// same module); and the Grafana dashboard (deploy/grafana/usher.json) may
// ask only for metrics the services export (deploy/grafana/metrics/).
package deploycheck
