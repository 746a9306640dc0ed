-- Latency percentiles per service and operation
--
-- Answers: how long each operation of each service takes (p50/p95/p99 in
-- milliseconds) over the last 24 hours, busiest operations first.
-- Index: the window's two bounds prune every partition but the recent ones
-- (the default partition included), which it reads whole; with a
-- service_name filter over a short window, an index of your own on
-- spans_rows (service_name, start_time) serves it (README, Indexes).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT service_name,
       span_name,
       count(*) AS spans,
       round((percentile_cont(0.50) WITHIN GROUP (ORDER BY duration_ns) / 1e6)::numeric, 2) AS p50_ms,
       round((percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_ns) / 1e6)::numeric, 2) AS p95_ms,
       round((percentile_cont(0.99) WITHIN GROUP (ORDER BY duration_ns) / 1e6)::numeric, 2) AS p99_ms
FROM otel.spans
WHERE start_time > now() - interval '24 hours' AND start_time <= now()
GROUP BY service_name, span_name
ORDER BY spans DESC, service_name, span_name;
