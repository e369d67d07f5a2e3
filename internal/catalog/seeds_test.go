package catalog_test

import (
	"errors"
	"testing"

	"usher/internal/bus"
	"usher/internal/catalog"
	"usher/internal/event"
	"usher/internal/testenv"
)

// The seed a lottery committed to is the bucket's until the draw writes it
// into the catalog; a catalog written before seeds had a bucket of their
// own keeps its own; a commitment with no seed stored is an error, never
// another lottery's seed.
func TestSeedOf(t *testing.T) {
	ctx := t.Context()
	nc, js, err := bus.Open(ctx, bus.Settings{URLs: []string{testenv.NATS(t)}, Replicas: 1}, "seeds-test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if err := catalog.DeclareSeeds(ctx, js, 1); err != nil {
		t.Fatal(err)
	}
	q := testenv.Name(t)
	if _, err := js.Publish(ctx, event.SeedSubject(q, "c1"), []byte("5eed1")); err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(ctx, event.SeedSubject(q, "c2"), []byte("5eed2")); err != nil { // another request's, unused
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		l    catalog.Lottery
		want string
	}{
		{"from the bucket", catalog.Lottery{Commitment: "c1"}, "5eed1"},
		{"by its own commitment", catalog.Lottery{Commitment: "c2"}, "5eed2"},
		{"revealed in the catalog", catalog.Lottery{Commitment: "c1", Seed: "5eedc", Drawn: true}, "5eedc"},
		{"an older catalog's", catalog.Lottery{Commitment: "c9", Seed: "01d"}, "01d"},
	} {
		if got, err := catalog.SeedOf(ctx, js, q, tt.l); err != nil || got != tt.want {
			t.Errorf("%s: SeedOf = %q, %v; want %q", tt.name, got, err, tt.want)
		}
	}
	if got, err := catalog.SeedOf(ctx, js, q, catalog.Lottery{Commitment: "c3"}); !errors.Is(err, catalog.ErrNoSeed) {
		t.Errorf("SeedOf(a commitment with no seed) = %q, %v; want ErrNoSeed", got, err)
	}
}

// A configuration shown to anyone but the drawing admitter — the admin API,
// the audit records — carries no seed until the draw.
func TestRedactedHidesTheSeedUntilTheDraw(t *testing.T) {
	cfg := catalog.Defaults("q")
	cfg.Lottery = &catalog.Lottery{Commitment: "c", Seed: "5eed"}
	if r := cfg.Redacted(); r.Lottery.Seed != "" || r.Lottery.Commitment != "c" || cfg.Lottery.Seed != "5eed" {
		t.Errorf("Redacted = %+v (original %+v); want the seed out of the copy only", r.Lottery, cfg.Lottery)
	}
	cfg.Lottery.Drawn = true
	if r := cfg.Redacted(); r.Lottery.Seed != "5eed" {
		t.Errorf("Redacted after the draw = %+v; want the seed", r.Lottery)
	}
}
