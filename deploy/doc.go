// Package deploy checks the deployment files at the repository's top level
// (compose.yaml) against the code: a variable set in a deployment that no
// service reads is a silent misconfiguration. It also holds the Grafana
// dashboard (grafana/usher.json), checked against the metrics the services
// export (grafana/metrics/).
package deploy
