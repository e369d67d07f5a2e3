package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

// A join is answered 202 with its stream sequence once the broker stored
// it, and reaches the line in Redis scored by that sequence; a double
// click is the broker's duplicate, the same place. A join without a user
// is refused. The prototype stops when its context ends.
func TestAJoinIsStoredThenPlacedInTheLine(t *testing.T) {
	natsURL := testenv.NATS(t)
	rdb := testenv.OwnRedis(t)
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ended := make(chan error, 1)
	go func() {
		ended <- run(ctx, []string{"-listen", addr, "-nats", natsURL, "-redis", rdb.Options().Addr}, io.Discard)
	}()

	join := func(user string) (int, uint64) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/v1/queues/drop/tickets", nil)
		if user != "" {
			req.Header.Set("X-User-Id", user)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, 0
		}
		defer resp.Body.Close()
		var body struct{ Seq uint64 }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Seq
	}
	var first uint64
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, seq := join("ann")
		first = seq
		return code == http.StatusAccepted
	}, "the first join is accepted")
	if code, seq := join("bob"); code != http.StatusAccepted || seq != first+1 {
		t.Errorf("bob's join = %d, seq %d; want 202, seq %d", code, seq, first+1)
	}
	if code, seq := join("ann"); code != http.StatusAccepted || seq != first {
		t.Errorf("ann's second join = %d, seq %d; want 202 with her first seq %d", code, seq, first)
	}
	if code, _ := join(""); code != http.StatusUnauthorized {
		t.Errorf("a join without X-User-Id = %d, want 401", code)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		line, err := rdb.ZRangeWithScores(context.Background(), zkey, 0, -1).Result()
		if err != nil {
			return err
		}
		want := []redis.Z{{Score: float64(first), Member: "drop/ann"}, {Score: float64(first + 1), Member: "drop/bob"}}
		if fmt.Sprint(line) != fmt.Sprint(want) {
			return fmt.Errorf("line %v, want %v", line, want)
		}
		return nil
	}, "both joins are in the line, once each, in order")

	cancel()
	testenv.EndsWith(t, ended, 10*time.Second, nil)
	if _, err := http.Post("http://"+addr+"/v1/queues/drop/tickets", "", strings.NewReader("")); err == nil {
		t.Error("the prototype still answers after its context ended")
	}
}
