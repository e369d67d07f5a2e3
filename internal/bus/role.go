package bus

import (
	"fmt"
	"regexp"
	"strings"
)

// Role is an identity on the broker: one of usher's services, usherctl, or
// a downstream reader. Each has its own NKey, its own reply subjects
// (Inbox), and the permissions Policy.Permissions derives for it.
type Role string

// usher's own roles; a service's role is its name.
const (
	Gateway     Role = "gateway"
	Admitter    Role = "admitter"
	Notifier    Role = "notifier"
	OrderWorker Role = "orderworker"
	Usherctl    Role = "usherctl"
)

// Services are usher's own roles, in the order a server configuration
// lists them.
var Services = []Role{Gateway, Admitter, Notifier, OrderWorker, Usherctl}

const downstreamPrefix = "downstream-"

// downstreamRE bounds a downstream reader's name: it is a durable
// consumer's name, a subject token and a file name.
var downstreamRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,48}$`)

// Downstream is the role of the downstream reader called name: it reads
// USHER_ADMISSIONS through its own durable consumer, also called name, and
// nothing else.
func Downstream(name string) Role { return Role(downstreamPrefix + name) }

// ValidDownstream checks a downstream reader's name.
func ValidDownstream(name string) error {
	if !downstreamRE.MatchString(name) {
		return fmt.Errorf("downstream reader %q: want 1-48 of A-Z a-z 0-9 _ -", name)
	}
	return nil
}

// downstream returns the reader's name when r is a downstream reader's role.
func (r Role) downstream() (string, bool) {
	return strings.CutPrefix(string(r), downstreamPrefix)
}

// Inbox is the prefix of the role's reply subjects (nats.CustomInboxPrefix):
// a role may subscribe only under its own, so no process reads another's
// replies — publish acks, consumer deliveries, API answers.
func (r Role) Inbox() string { return "_INBOX_" + string(r) }

// Declares reports whether the role creates and updates the streams and
// the catalog's bucket. Only the admitter does: nothing is admitted without
// it, so the streams exist whenever usher works, and every other role
// waits for them (see Open) instead of holding the right to change their
// retention.
func (r Role) Declares() bool { return r == Admitter }
