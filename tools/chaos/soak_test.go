package main

import (
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

// make soak's block replaces the last one in the file, and make chaos's
// rewrite of the file keeps it.
func TestTheSoakBlockIsReplacedAndKept(t *testing.T) {
	path := filepath.Join(t.TempDir(), "RELIABILITY.md")
	os.WriteFile(path, []byte("# Reliability\n\ntable\n"), 0o644)
	if err := writeSoakBlock(path, "first\n"); err != nil {
		t.Fatal(err)
	}
	if err := writeSoakBlock(path, "second\n"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	s := string(b)
	if strings.Contains(s, "first") || !strings.Contains(s, "second") || strings.Count(s, soakBegin) != 1 || !strings.HasPrefix(s, "# Reliability\n\ntable\n") {
		t.Fatalf("after two soaks:\n%s", s)
	}
	if err := writeReliability(path, nil, options{seed: 1, source: "test"}); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !strings.Contains(string(b), "second") || strings.Count(string(b), soakBegin) != 1 {
		t.Errorf("make chaos's rewrite lost the soak:\n%s", b)
	}
}
