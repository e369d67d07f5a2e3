package bus

import (
	"fmt"
	"slices"
	"strings"

	"usher/internal/event"
)

// Permissions are what one role may do on the broker: NATS subject
// patterns it may publish to and subscribe to. A deny overrides an allow.
type Permissions struct {
	Publish   Rules
	Subscribe Rules
}

// Rules are allowed and denied subject patterns, sorted.
type Rules struct {
	Allow []string
	Deny  []string
}

// Policy is the broker's whole permission set: usher's roles (Services)
// and the downstream readers it names.
type Policy struct {
	// Downstream names the downstream readers (see Downstream).
	Downstream []string
}

// Validate checks the downstream readers' names.
func (p Policy) Validate() error {
	seen := map[string]bool{}
	for _, name := range p.Downstream {
		if err := ValidDownstream(name); err != nil {
			return err
		}
		if seen[name] {
			return fmt.Errorf("downstream reader %q named twice", name)
		}
		seen[name] = true
	}
	return nil
}

// Roles lists every role of the policy: usher's, then the downstream
// readers'.
func (p Policy) Roles() []Role {
	roles := slices.Clone(Services)
	for _, name := range p.Downstream {
		roles = append(roles, Downstream(name))
	}
	return roles
}

// durable is a durable consumer: one role pulls from it and acknowledges
// its messages, and every other role is kept away from it.
type durable struct {
	stream, name string
	owner        Role
}

func (p Policy) durables() []durable {
	ds := []durable{{event.StreamOrders, event.ConsumerOrderWorker, OrderWorker}}
	for _, name := range p.Downstream {
		ds = append(ds, durable{event.StreamAdmissions, name, Downstream(name)})
	}
	return ds
}

// Permissions derives what role r may do, from the subjects and streams
// package event names; ok is false for a role the policy does not know.
// Every role subscribes only to its own Inbox. Besides:
//
//	gateway      publishes joins, leaves, order requests and config changes;
//	             writes and follows the catalog; writes lottery seeds
//	admitter     declares the streams, the catalog's bucket, the seeds' and
//	             the durable consumers (Durables); publishes admissions;
//	             reads entries, admissions and orders with ordered
//	             consumers; follows the catalog; reads seeds (no other role
//	             may read a seed)
//	notifier     publishes nothing; subscribes to admissions, leaves and
//	             order events as the streams republish them once stored
//	             (event.Live); follows the catalog
//	orderworker  publishes order outcomes; consumes order requests through
//	             its durable consumer, which it binds to; follows the
//	             catalog
//	usherctl     reads every stream and the catalog with direct gets;
//	             republishes under replay.> only
//	downstream   reads USHER_ADMISSIONS through its own durable consumer,
//	             which it binds to; receives republished events on
//	             replay.<name>.>
//
// Every usher service also reads the streams' info (their identities),
// and follows the catalog with a subscription to what its bucket
// republishes and message gets (see package catalog).
//
// No role but the admitter may create a consumer. nats-server lets
// whoever may create one create a push consumer delivering on any
// subject, and publishes there for it through an internal client, its
// creator's publish permissions unchecked — on a subject the server
// itself listens on, such as another consumer's reset request, too — and
// permissions cannot tell a push consumer's creation from a pull one's.
// The admitter, which may create and update the streams, can do as much
// harm as that already. It reads with ordered consumers it names itself,
// so it is denied deleting and pulling from the others' durables by name.
//
// No role may subscribe to a subject any stream stores either: a push
// consumer the admitter's key created would deliver into that stream once
// something subscribes to that very subject. Subscriptions stay on inboxes
// and on subjects no stream captures (event.Live,
// event.CatalogLiveSubjects, event.ReplaySubject).
func (p Policy) Permissions(r Role) (Permissions, bool) {
	g := newGrant()
	g.subscribe(r.Inbox() + ".>")
	switch r {
	case Gateway:
		g.publish(event.EnterSubject(event.All), event.LeaveSubject(event.All),
			event.OrderRequestedSubject(event.All), event.ConfigChangedSubject)
		g.identities()
		g.followCatalog()
		g.writeCatalog()
		g.publish(event.SeedSubjects) // a scheduled drop's seed: written, never read back
	case Admitter:
		g.declare()
		// Admissions, and the one configuration change it makes: closing a
		// sold-out queue (a compare-and-set on the catalog), audited.
		g.publish(event.AdmittedSubject(event.All), event.ConfigChangedSubject, event.LotteryDrawnSubject)
		g.publish(event.LeaveSubject(event.All)) // shoppers found gone (abandoned)
		// Large moves of a queue's adaptive limit, recorded.
		g.publish(event.LimitChangedSubject)
		g.read(event.StreamEntries, event.StreamAdmissions, event.StreamOrders)
		g.identities()
		g.followCatalog()
		g.writeCatalog()
		g.get(event.StreamSeeds) // the seed of the lottery it draws
	case Notifier:
		// The notifier's three core subscriptions: what the streams
		// republish once stored, never a subject a stream stores.
		g.subscribe(event.Live(event.AdmittedSubject(event.All)), event.Live(event.LeaveSubject(event.All)),
			event.Live(event.OrderSubjects(event.All)))
		g.identities()
		g.followCatalog()
	case OrderWorker:
		g.publish(event.OrderCompletedSubject(event.All), event.OrderFailedSubject(event.All))
		g.durable(event.StreamOrders, event.ConsumerOrderWorker)
		g.get(event.StreamAdmissions) // an order's admission, read back by sequence before it is charged
		g.identities()
		g.followCatalog()
	case Usherctl:
		g.get(streamNames()...)
		g.readCatalog()
		g.api("STREAM", "NAMES") // which stream stores a republish subject
		g.publish(event.ReplaySubjects)
	default:
		name, ok := r.downstream()
		if !ok || !slices.Contains(p.Downstream, name) {
			return Permissions{}, false
		}
		g.durable(event.StreamAdmissions, name)
		g.subscribe(event.ReplaySubject(name))
	}
	// The admitter declares the durables (its consumer creation on their
	// streams covers them) and may look them up, but neither deletes
	// them nor pulls from them.
	for _, d := range p.durables() {
		if d.owner != r && g.reads[d.stream] {
			g.deny(api("CONSUMER", "DELETE", d.stream, d.name), api("CONSUMER", "MSG", "NEXT", d.stream, d.name))
		}
	}
	return g.permissions(), true
}

// streamNames are usher's event streams.
func streamNames() []string {
	var names []string
	for _, cfg := range Streams() {
		names = append(names, cfg.Name)
	}
	return names
}

// api is a JetStream API subject.
func api(tokens ...string) string { return "$JS.API." + strings.Join(tokens, ".") }

// grant collects a role's subjects capability by capability.
type grant struct {
	pub, sub, denyPub map[string]bool
	reads             map[string]bool // streams it may create consumers on freely
}

func newGrant() *grant {
	return &grant{pub: map[string]bool{}, sub: map[string]bool{}, denyPub: map[string]bool{}, reads: map[string]bool{}}
}

func (g *grant) publish(subjects ...string) {
	for _, s := range subjects {
		g.pub[s] = true
	}
}

func (g *grant) subscribe(subjects ...string) {
	for _, s := range subjects {
		g.sub[s] = true
	}
}

func (g *grant) deny(subjects ...string) {
	for _, s := range subjects {
		g.denyPub[s] = true
	}
}

// api allows one JetStream API request; its answer comes to the inbox.
func (g *grant) api(tokens ...string) { g.publish(api(tokens...)) }

// info allows reading streams' configuration and state.
func (g *grant) info(streams ...string) {
	for _, s := range streams {
		g.api("STREAM", "INFO", s)
	}
}

// identities: every service reads every stream's info once a second
// (Identities).
func (g *grant) identities() { g.info(streamNames()...) }

// get allows reading stored messages — one by sequence or the last on a
// subject, through the API or directly, and batches of them directly (the
// streams allow direct gets) — and the streams' info.
func (g *grant) get(streams ...string) {
	for _, s := range streams {
		g.info(s)
		g.api("STREAM", "MSG", "GET", s)
		g.api("DIRECT", "GET", s)
		g.api("DIRECT", "GET", s, ">")
	}
}

// read allows reading streams with ordered consumers: ephemeral consumers
// the client names itself, created, pulled from, looked up and deleted
// when they reset.
func (g *grant) read(streams ...string) {
	for _, s := range streams {
		g.get(s)
		g.api("CONSUMER", "CREATE", s, ">")
		g.api("CONSUMER", "MSG", "NEXT", s, "*")
		g.api("CONSUMER", "INFO", s, "*")
		g.api("CONSUMER", "DELETE", s, "*")
		g.reads[s] = true
	}
}

// durable allows the role's own durable consumer, as the admitter
// declares it: looking it up (binding, lag), pulling from it and
// acknowledging its messages.
func (g *grant) durable(stream, name string) {
	g.api("CONSUMER", "INFO", stream, name)
	g.api("CONSUMER", "MSG", "NEXT", stream, name)
	g.publish("$JS.ACK." + stream + "." + name + ".>")
}

// declare allows creating and updating every stream, the catalog's bucket
// and the seeds' (declaring a bucket reads the account's JetStream info
// first).
func (g *grant) declare() {
	g.api("INFO")
	for _, s := range append(streamNames(), event.StreamQueues, event.StreamSeeds) {
		g.api("STREAM", "CREATE", s)
		g.api("STREAM", "UPDATE", s)
		g.info(s)
	}
}

// followCatalog allows following the catalog as package catalog does: a
// subscription to what the bucket republishes, and message gets of what it
// holds.
func (g *grant) followCatalog() {
	g.readCatalog()
	g.subscribe(event.CatalogLiveSubjects)
}

// readCatalog allows reading queues' configurations.
func (g *grant) readCatalog() { g.get(event.StreamQueues) }

// writeCatalog allows storing a queue's configuration: a publish on its
// subject (create checks the last revision with a get).
func (g *grant) writeCatalog() {
	g.publish(event.QueueConfigSubjects)
	g.readCatalog()
}

func (g *grant) permissions() Permissions {
	return Permissions{
		Publish:   Rules{Allow: sorted(g.pub), Deny: sorted(g.denyPub)},
		Subscribe: Rules{Allow: sorted(g.sub)},
	}
}

func sorted(set map[string]bool) []string {
	if len(set) == 0 {
		return nil
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
