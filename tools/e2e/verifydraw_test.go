package e2e

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"usher/internal/testenv"
)

// A sceptical shopper checks the draw with what usher publishes and nothing
// else: the commitment read from the public view before the opening, the
// public view after it (seed, entries, order digest), and the pre-queue's
// list the shop published (usherctl audit --lottery-list). They recompute
// the order as docs/events.md says, check it is the one drawn — the digest of
// their recomputed order is the one usher published — and find their own
// place in it, which is the place the line gives them. The order digest
// is in the public view, not only in the ops stream's event, which no
// shopper can read: without it a published list could leave someone out
// and nobody outside could tell.
func TestAShopperChecksTheDrawFromPublicDataAlone(t *testing.T) {
	t.Parallel()
	r := newDropRig(t)
	off := `"rateLimit": {"perIpPerSecond": 0, "perUserPerSecond": 0, "ordersPerSecond": 0}`
	// Paused: nobody is admitted, so each place stays as the draw gave it.
	opens := time.Now().Add(4 * time.Second)
	r.configure(`{"targetActive": 10, "state": "paused", ` + off + `, "opensAt": "` + opens.UTC().Format(time.RFC3339Nano) + `"}`)
	before := r.public()["lottery"].(map[string]any)
	commitment, _ := before["commitment"].(string)
	if len(commitment) != 64 || before["seed"] != nil || before["orderDigest"] != nil {
		t.Fatalf("public lottery before the opening = %v; want a commitment alone", before)
	}

	users := make([]string, 60)
	for i := range users {
		users[i] = fmt.Sprintf("shopper-%02d@example.com", i)
	}
	tickets := r.joinAll(users)
	for _, u := range users[:5] { // five leave before the opening
		if code, body := call(t, "DELETE", r.base+"/v1/queues/"+r.queue+"/tickets/"+tickets[u]["ticket"].(string), "", nil); code >= 300 {
			t.Fatalf("leave %s = %d %v", u, code, body)
		}
	}

	var lot map[string]any
	testenv.Eventually(t, 20*time.Second, func() error {
		if lot = r.public()["lottery"].(map[string]any); lot["seed"] == nil {
			return fmt.Errorf("not drawn yet: %v", lot)
		}
		return nil
	}, "the seed revealed")

	// The shop publishes the pre-queue's list.
	dir := t.TempDir()
	list := filepath.Join(dir, "prequeue.txt")
	cmd := exec.Command(filepath.Join(bins, "usherctl"), "audit", "--queue", r.queue, "--lottery-list", list)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "USHER_NATS_URL=" + r.env["USHER_NATS_URL"]}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("usherctl audit --lottery-list: %v\n%s", err, out)
	}
	b, err := os.ReadFile(list)
	if err != nil {
		t.Fatal(err)
	}
	published := strings.Fields(string(b))

	// The shopper: the seed is the one committed to…
	seedHex, _ := lot["seed"].(string)
	seed, err := hex.DecodeString(seedHex)
	if sum := sha256.Sum256(seed); err != nil || hex.EncodeToString(sum[:]) != commitment {
		t.Fatalf("the revealed seed %q does not open the commitment %s", seedHex, commitment)
	}
	// …the published list, in lottery order, is the one drawn…
	order := independentOrder(t, seedHex, published)
	digest := sha256.Sum256([]byte(strings.Join(order, "\n") + "\n"))
	if lot["orderDigest"] != hex.EncodeToString(digest[:]) || lot["entries"] != float64(len(order)) {
		t.Fatalf("public lottery = %v; want entries %d and orderDigest %x, the recomputed order's", lot, len(order), digest)
	}
	// A list with someone left out is not the one drawn.
	short := independentOrder(t, seedHex, published[1:])
	if d := sha256.Sum256([]byte(strings.Join(short, "\n") + "\n")); lot["orderDigest"] == hex.EncodeToString(d[:]) {
		t.Fatal("a list with someone left out has the published digest")
	}
	// …and it holds everyone who stayed, nobody who left.
	stayed := slices.Clone(users[5:])
	slices.Sort(stayed)
	if got := slices.Sorted(slices.Values(published)); !slices.Equal(got, stayed) {
		t.Fatalf("published list = %v, want the %d who stayed", got, len(stayed))
	}
	// Each shopper's place is their line in the recomputed order.
	for i, u := range order {
		if p := r.poll(tickets[u]["ticket"].(string)); p["status"] != "WAITING" || p["position"] != float64(i+1) {
			t.Fatalf("%s: %v at %v, want WAITING at %d (their line in the recomputed order)", u, p["status"], p["position"], i+1)
		}
	}
}
