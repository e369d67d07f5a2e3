package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCPU is the CPU time (user and system) rdb's server has used so far,
// from INFO cpu: benchmarks report Redis's share of their work with it.
func RedisCPU(t testing.TB, rdb redis.UniversalClient) time.Duration {
	t.Helper()
	var total float64
	for k, v := range redisInfo(t, rdb, "cpu") {
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("INFO cpu %s: %v", k, err)
			}
			total += f
		}
	}
	return time.Duration(total * float64(time.Second))
}

// RedisCalls is how many times rdb's server has run command (INFO
// commandstats; "evalsha", say).
func RedisCalls(t testing.TB, rdb redis.UniversalClient, command string) int {
	t.Helper()
	stats, ok := redisInfo(t, rdb, "commandstats")["cmdstat_"+command]
	if !ok {
		return 0
	}
	calls, _, _ := strings.Cut(strings.TrimPrefix(stats, "calls="), ",")
	n, err := strconv.Atoi(calls)
	if err != nil {
		t.Fatalf("INFO commandstats %s: %v", stats, err)
	}
	return n
}

func redisInfo(t testing.TB, rdb redis.UniversalClient, section string) map[string]string {
	t.Helper()
	info, err := rdb.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}
