-- wrk script for `make bench` (the polls goal): polls of one ticket (the
-- URL given); prints one machine-readable line at the end.
function done(summary, latency, requests)
  local s = summary.duration / 1e6
  io.write(string.format("WRK rps=%.1f p50_ms=%.2f p99_ms=%.2f requests=%d non2xx=%d errors=%d\n",
    summary.requests / s, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
