package main

import (
	"context"
	"fmt"
	"syscall"
	"time"
)

// defaultSkewRef is the release version-skew runs the new build beside:
// the commit before group commit became the default (319116f), whose
// gateways write every join as its own usher.joined.v1 message. A commit
// of main, not a tag: every clone holds it, and tags do not travel with
// a clone of the branch.
const defaultSkewRef = "afda0e85bf4aeec1c11f57cb942d80c68e1048ad"

// versionSkew runs half the copies of every service on the previous
// release's build for the rest of the run, one copy at a time as a rolling
// update leaves them half way: each service's second copy is stopped by
// SIGTERM and started again from the previous release. Both builds then
// write the record and read each other's. The new gateways do not group
// joins (USHER_JOIN_GROUPS=off, set by the scenario's plan): the upgrade
// docs/events.md prescribes from a release whose gateways write only v1.
func versionSkew(ctx context.Context, f *fault) error {
	prev := f.s.bins.previous
	if prev == nil {
		return fmt.Errorf("version-skew: the previous release was not built (-skew-ref)")
	}
	f.injected("the second copy of every service restarted on the previous release (%s), for the rest of the run", prev.source)
	for _, kind := range serviceKinds {
		sv := f.s.service(kind, 1)
		if err := sv.proc.terminate(syscall.SIGTERM, 10*time.Second); err != nil {
			return fmt.Errorf("stop %s: %w", sv.name(), err)
		}
		sv.proc.path = prev.service[kind]
		if err := f.s.restart(ctx, sv); err != nil {
			return fmt.Errorf("start %s on %s: %w", sv.name(), prev.source, err)
		}
		f.j.add(record{Kind: recFault, Detail: fmt.Sprintf("%s stopped by SIGTERM, restarted on %s and ready", sv.name(), prev.source)})
	}
	f.healed("half the copies on %s, half on this build, until the end", prev.source)
	return nil
}
