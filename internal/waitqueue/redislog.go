package waitqueue

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"github.com/redis/go-redis/v9"
)

// redisLog hands what go-redis logs to a slog logger, at debug level.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, fmt.Sprintf(format, v...), "from", "go-redis")
}

// redisLogOnce is the one piece of package state here, forced by go-redis:
// its logger is process-wide (v9 has none per client), so the process's
// first LogRedisTo is the one that holds.
var redisLogOnce sync.Once

// LogRedisTo sends what go-redis itself logs — its dial failures and
// connection-pool trouble, otherwise printed in its own plain format on
// stderr ("redis: 2026/12/03 … pool.go:770: … connection refused") — to
// log, as the process's other lines, at debug level (USHER_LOG_LEVEL=debug
// shows them).
//
// Debug, not warn, because each of those failures is also the error of
// the command that met it, which the process already reports once with its
// cause (a service's warn or error line, usherctl's error): at warn, a
// Redis outage's reconnect storm would print every failure twice.
//
// The first call in a process sets it for the rest of the process; later
// calls do nothing. A service calls it from service.Open and usherctl from
// its run, once each in a process of their own; a test binary that starts
// many in-process keeps the first one's logger, and sets go-redis's logger
// once, not at every start.
func LogRedisTo(log *slog.Logger) {
	redisLogOnce.Do(func() { redis.SetLogger(redisLog{log}) })
}
