-- wrk script for `make bench` (the joins goal): every request is a join of a
-- user of its own, so each one publishes a new entry (none is a 200 repeat).
--   wrk -t2 -c256 -d10s --latency -s scripts/bench/join.lua http://127.0.0.1:18080 -- QUEUE TAG
local threads = 0

function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end

function init(args)
  path = "/v1/queues/" .. args[1] .. "/tickets"
  prefix = (args[2] or "w") .. "-" .. tid .. "-"
  n = 0
end

function request()
  n = n + 1
  return wrk.format("POST", path, { ["X-User-Id"] = prefix .. n }, "")
end

function done(summary, latency, requests)
  local s = summary.duration / 1e6
  io.write(string.format("WRK rps=%.1f p50_ms=%.2f p99_ms=%.2f requests=%d non2xx=%d errors=%d\n",
    summary.requests / s, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
    summary.requests, summary.errors.status, summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout))
end
