// Package deploycheck checks the deployment files against the code: a
// variable that compose.yaml sets and no service reads is a silent
// misconfiguration, and the Grafana dashboard (deploy/grafana/usher.json)
// may ask only for metrics the services export (deploy/grafana/metrics/).
package deploycheck
