// Package deploy checks the deployment files at the repository's top level
// (compose.yaml) against the code: a variable set in a deployment that no
// service reads is a silent misconfiguration.
package deploy
