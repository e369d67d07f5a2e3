package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"usher/internal/config"
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

// Services starting side by side race to create the same key file: every
// one of them must read the same, complete contents.
func TestLoadOrCreateFileUnderARace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys", "secret")
	const n = 16
	got := make([][]byte, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b, err := config.LoadOrCreateFile(path, func() ([]byte, error) {
				return []byte(strings.Repeat(string(rune('a'+i)), 4096)), nil
			})
			if err != nil {
				t.Error(err)
			}
			got[i] = b
		}()
	}
	wg.Wait()
	for i := range got {
		if len(got[i]) != 4096 || string(got[i]) != string(got[0]) {
			t.Fatalf("process %d read %d bytes %.8q…, want the same 4096 bytes as process 0", i, len(got[i]), got[i])
		}
	}
	if info, err := os.Stat(path); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("file mode = %v, %v; want 0600", info.Mode().Perm(), err)
	}
}

// A listen address is host:port, checked with the rest of the settings:
// "127.0.0.1" without its port, let pass, would fail only at the listen,
// after the service had connected everything else (USHER_PPROF_ADDR's
// after the service reported itself running).
func TestAddrWantsHostPort(t *testing.T) {
	for _, tt := range []struct {
		value, want string // want "": refused
	}{
		{"", "127.0.0.1:8080"},
		{"127.0.0.1:9000", "127.0.0.1:9000"},
		{":8080", ":8080"},
		{"[::1]:0", "[::1]:0"},
		{"gateway.internal:8080", "gateway.internal:8080"},
		{"127.0.0.1", ""},
		{"8080", ""},
		{"127.0.0.1:99999", ""},
		{"127.0.0.1:-1", ""},
		{"::1:8080", ""},
	} {
		vars := map[string]string{"X_ADDR": tt.value}
		env := config.New(func(k string) string { return vars[k] })
		got := env.Addr("X_ADDR", "127.0.0.1:8080")
		err := env.Err()
		if tt.want == "" {
			if err == nil || !strings.Contains(err.Error(), `X_ADDR="`+tt.value+`": want host:port`) {
				t.Errorf("Addr(X_ADDR=%q): error %v, want one naming X_ADDR", tt.value, err)
			}
			continue
		}
		if got != tt.want || err != nil {
			t.Errorf("Addr(X_ADDR=%q) = %q, error %v; want %q, nil", tt.value, got, err, tt.want)
		}
	}
}

// fakeNow is a clock the test moves by hand.
type fakeNow struct{ t time.Time }

func (f *fakeNow) now() time.Time { return f.t }

func TestLocalClockStepsByTheStepOnceItsMomentHasCome(t *testing.T) {
	vars := map[string]string{"USHER_FAULT_CLOCK_OFFSET": "1m", "USHER_FAULT_CLOCK_STEP": "-2m@20s"}
	env := config.New(func(k string) string { return vars[k] })
	host := &fakeNow{t: time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)}
	start := host.t
	local := env.LocalClockFrom(host.now)
	if err := env.Err(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		since time.Duration // host time since the clock was made
		want  time.Duration // local clock minus host clock
	}{
		{0, time.Minute},
		{19*time.Second + 999*time.Millisecond, time.Minute},
		{20 * time.Second, -time.Minute},
		{time.Hour, -time.Minute},
	}
	for _, tt := range tests {
		host.t = start.Add(tt.since)
		if got := local().Sub(host.t); got != tt.want {
			t.Errorf("%v after the start: local clock %v off the host's, want %v", tt.since, got, tt.want)
		}
	}
}

func TestLocalClockIsTheHostsWithoutTheKnobs(t *testing.T) {
	env := config.New(func(string) string { return "" })
	host := &fakeNow{t: time.Date(2026, 12, 5, 5, 0, 0, 0, time.UTC)}
	local := env.LocalClockFrom(host.now)
	host.t = host.t.Add(time.Hour)
	if got := local(); !got.Equal(host.t) {
		t.Errorf("local() = %v, want the host's %v", got, host.t)
	}
}

func TestLocalClockStepRefusesMalformedValues(t *testing.T) {
	for _, v := range []string{"-2m", "-2m@", "@20s", "soon@20s", "-2m@-1s", "-2m@later"} {
		env := config.New(func(k string) string {
			if k == "USHER_FAULT_CLOCK_STEP" {
				return v
			}
			return ""
		})
		env.LocalClockFrom(time.Now)
		if err := env.Err(); err == nil || !strings.Contains(err.Error(), "USHER_FAULT_CLOCK_STEP") {
			t.Errorf("USHER_FAULT_CLOCK_STEP=%q: error %v, want one naming the variable", v, err)
		}
	}
}
