// Command envoycheck checks an Envoy http_filters list (the shape of
// docs/integration.md's Envoy snippet) the way Envoy checks its own
// configuration on load: the list decodes strictly into Envoy's v3 API
// types (an unknown field, a wrong type or an unresolvable "@type" is an
// error), every filter and every typed_config passes the validation rules
// Envoy's API declares (protoc-gen-validate's, as go-control-plane
// generates them), and the router, a terminal filter, comes last. Fields
// Envoy has deprecated are reported as warnings, as Envoy logs them.
//
// It lives in the Helm tools module, not in usher/tools, so that the
// race-instrumented test binaries never compile Envoy's API: the test in
// tools/deploycheck runs it as a program. It cannot tell whether a live
// Envoy routes as intended; only that Envoy would accept the filters.
//
//	envoycheck FILE
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run checks the file its one argument names and returns the exit code:
// 0 when Envoy would accept the filters, 1 when not, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: envoycheck FILE")
		return 2
	}
	path := args[0]
	raw, err := os.ReadFile(path)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	res, err := check(raw)
	for _, w := range res.warnings {
		fmt.Fprintf(stderr, "%s: warning: %s\n", path, w)
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", path, err)
		return 1
	}
	fmt.Fprintf(stdout, "ok: %d http filters\n", res.filters)
	return 0
}
