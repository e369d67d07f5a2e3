package main

import (
	"maps"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The soak's slope is least squares with its 95 % interval: a line's
// slope exactly, noise around a flat mean an interval that holds 0.
func TestFitSlope(t *testing.T) {
	var ts, line, flat []float64
	for i := range 100 {
		ts = append(ts, float64(i*10))
		line = append(line, 50+0.5*float64(i*10))
		flat = append(flat, 50+float64(i%3-1))
	}
	if s, ci, _ := fitSlope(ts, line); math.Abs(s-0.5) > 1e-9 || ci > 1e-9 {
		t.Errorf("a line of slope 0.5: %v ± %v", s, ci)
	}
	if s, ci, m := fitSlope(ts, flat); s-ci > 0 || s+ci < 0 || math.Abs(m-50) > 0.1 {
		t.Errorf("noise around 50: slope %v ± %v, mean %v; want an interval holding 0", s, ci, m)
	}
}

// A figure that grows by more than 5 % of its mean in an hour is called
// growing; one that stays is flat; the warm-up quarter is left out.
func TestSoakTableVerdicts(t *testing.T) {
	grow, flat := &series{}, &series{}
	for i := range 40 {
		at := float64(i * 60)
		v := 100.0
		if i < 10 {
			v = 10 // the warm-up
		}
		flat.add(at, v+float64(i%2))
		grow.add(at, 100+float64(i)*5)
	}
	table := soakTable(map[string]*series{"gateway-1 RSS MiB": grow, "redis keys (masters)": flat}, 40*time.Minute, 20)
	for _, want := range []string{"| gateway-1 RSS MiB |", "| grows |", "| redis keys (masters) |", "| flat |"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// Keys kept for a set time grow through any soak shorter than that time:
// the table says so, and what Redis's memory grew by per such key, so a
// reader can tell records kept by design from a leak.
func TestSoakTableExplainsKeysKeptForTheirTTL(t *testing.T) {
	kept, mem := &series{}, &series{}
	for i := range 40 {
		at := float64(i * 60)
		kept.add(at, 1000+float64(i)*100) // 6,000 an hour
		mem.add(at, 50+float64(i)*100*250/(1<<20))
	}
	table := soakTable(map[string]*series{keysExpiring: kept, memoryMiB: mem}, 40*time.Minute, 20)
	for _, want := range []string{"| grows: records kept for their TTL (a day, a week) |", "grew 6000: 250 bytes a key"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestKeyspaceCountsSumsEveryDatabase(t *testing.T) {
	info := "# Memory\r\nused_memory:100\r\n# Keyspace\r\ndb0:keys=12,expires=3,avg_ttl=0\r\ndb1:keys=5,expires=5,avg_ttl=10\r\n"
	if keys, expires := keyspaceCounts(info); keys != 17 || expires != 8 {
		t.Fatalf("keyspaceCounts = %v, %v; want 17, 8", keys, expires)
	}
}

// A family is summed over its label sets; a name that is the prefix of
// another family's does not take that family's samples.
func TestSumFamiliesSumsOverLabels(t *testing.T) {
	page := `# HELP go_goroutines Number of goroutines.
go_goroutines 42
go_goroutines_total_not 7
usher_redis_pool_connections{pool="commands",state="idle"} 5
usher_redis_pool_connections{pool="commands",state="in_use"} 2
usher_redis_pool_connections{pool="pipelines",state="idle"} 1
usher_redis_pool_connections_other 100
`
	got := sumFamilies(strings.NewReader(page), "go_goroutines", "usher_redis_pool_connections", "go_memstats_heap_inuse_bytes")
	want := map[string]float64{"go_goroutines": 42, "usher_redis_pool_connections": 8}
	if !maps.Equal(got, want) {
		t.Fatalf("sumFamilies = %v, want %v", got, want)
	}
}

// make soak's block replaces the last one in the file, and make chaos's
// rewrite of the file keeps it, and overload's block beside it.
func TestTheSoakBlockIsReplacedAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RELIABILITY.md")
	os.WriteFile(path, []byte("# Reliability\n\ntable\n\n<!-- overload: written by make bench -->\nshed\n<!-- /overload -->\n"), 0o644)
	if err := writeSoakBlock(path, "first\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeSoakBlock(path, "second\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "first") || !strings.Contains(s, "second") || strings.Count(s, soakBegin) != 1 || !strings.HasPrefix(s, "# Reliability\n\ntable\n") || !strings.Contains(s, "\nshed\n") {
		t.Fatalf("after two soaks:\n%s", s)
	}
	if err := writeReliability(path, nil, options{seed: 1, source: "test"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), "second") || strings.Count(string(b), soakBegin) != 1 || strings.Count(string(b), "\nshed\n") != 1 {
		t.Errorf("make chaos's rewrite lost the soak or the overload:\n%s", b)
	}
}
