package opshttp

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// RedisPools exports a Redis client's connection pools, read from the
// client at each scrape: the connections each holds, idle and in use, and
// how often it dialed, waited past its timeout or closed a connection
// idle too long. A service's open files and Redis's connected clients
// follow these. go-redis grows a pool under a burst, up to its bound
// (PoolSize per node for commands, PipelinePoolSize per node for
// pipelines), and runs no reaper: what shrinks a pool again is its
// MaxIdleConns (waitqueue.Settings.Idle), which closes a connection handed
// back beyond it. These tell that apart from a leak.
func RedisPools(rdb interface{ PoolStats() *redis.PoolStats }) prometheus.Collector {
	return &redisPools{
		stats: rdb.PoolStats,
		conns: prometheus.NewDesc("usher_redis_pool_connections",
			"Connections the Redis client's pool holds now, by pool (commands, pipelines) and state (idle, in_use).",
			[]string{"pool", "state"}, nil),
		dials: prometheus.NewDesc("usher_redis_pool_dials_total",
			"Connections the pool dialed because none was idle.", []string{"pool"}, nil),
		timeouts: prometheus.NewDesc("usher_redis_pool_timeouts_total",
			"Waits for a connection that ran out of time: the pool was at its bound.", []string{"pool"}, nil),
		stale: prometheus.NewDesc("usher_redis_pool_closed_idle_total",
			"Connections the pool closed as it took them: idle past ConnMaxIdleTime, or past their lifetime.", []string{"pool"}, nil),
	}
}

type redisPools struct {
	stats                         func() *redis.PoolStats
	conns, dials, timeouts, stale *prometheus.Desc
}

func (r *redisPools) Describe(ch chan<- *prometheus.Desc) {
	ch <- r.conns
	ch <- r.dials
	ch <- r.timeouts
	ch <- r.stale
}

func (r *redisPools) Collect(ch chan<- prometheus.Metric) {
	s := r.stats()
	r.pool(ch, "commands", s.TotalConns, s.IdleConns, s.Misses, s.Timeouts, s.StaleConns)
	if p := s.PipelineStats; p != nil {
		r.pool(ch, "pipelines", p.TotalConns, p.IdleConns, p.Misses, p.Timeouts, p.StaleConns)
	}
}

func (r *redisPools) pool(ch chan<- prometheus.Metric, name string, total, idle, dials, timeouts, stale uint32) {
	// Idle is read apart from total: the two may be a connection apart.
	inUse := max(int64(total)-int64(idle), 0)
	ch <- prometheus.MustNewConstMetric(r.conns, prometheus.GaugeValue, float64(idle), name, "idle")
	ch <- prometheus.MustNewConstMetric(r.conns, prometheus.GaugeValue, float64(inUse), name, "in_use")
	ch <- prometheus.MustNewConstMetric(r.dials, prometheus.CounterValue, float64(dials), name)
	ch <- prometheus.MustNewConstMetric(r.timeouts, prometheus.CounterValue, float64(timeouts), name)
	ch <- prometheus.MustNewConstMetric(r.stale, prometheus.CounterValue, float64(stale), name)
}
