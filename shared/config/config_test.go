package config_test

import (
	"strings"
	"testing"
	"time"

	"usher/shared/config"
)

func TestEnvReportsEveryProblemAtOnce(t *testing.T) {
	vars := map[string]string{"A": "x", "B": "-1", "C": "soon", "D": " 7 ", "L": "a, b,,c"}
	env := config.New(func(k string) string { return vars[k] })
	_ = env.Int("A", 1, 0)
	_ = env.Int("B", 1, 0)
	_ = env.Duration("C", time.Second)
	if got := env.Int("D", 1, 0); got != 7 {
		t.Errorf("Int(D) = %d, want 7", got)
	}
	if got := env.List("L", ""); strings.Join(got, "|") != "a|b|c" {
		t.Errorf("List(L) = %q, want a|b|c", got)
	}
	if got := env.String("UNSET", "def"); got != "def" {
		t.Errorf("String(UNSET) = %q, want def", got)
	}
	err := env.Err()
	if err == nil {
		t.Fatal("Err() = nil, want three problems")
	}
	for _, name := range []string{"A=", "B=", "C="} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("Err() = %v, want it to name %s", err, name)
		}
	}
	if got := strings.Join(env.Names(), ","); got != "A,B,C,D,L,UNSET" {
		t.Errorf("Names() = %s", got)
	}
}
