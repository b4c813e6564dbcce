-- wrk script: prints one machine-readable result line after the run.
-- Used on its own for fixed-URL runs (list, /healthz) and loaded by show.lua.
-- Latencies are in microseconds, as wrk reports them.

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests":%d,"duration_us":%d,"bytes":%d,' ..
    '"p50_us":%d,"p90_us":%d,"p99_us":%d,"max_us":%d,"mean_us":%.1f,' ..
    '"errors":{"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d}}\n',
    summary.requests, summary.duration, summary.bytes,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean,
    e.connect, e.read, e.write, e.status, e.timeout))
end
