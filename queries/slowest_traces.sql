-- The slowest traces
--
-- Answers: the 20 longest traces of the last 24 hours (first span start to
-- last span end), with their root operation, span count, services touched and
-- errors, to open in a trace view.
-- Index: none for the ranking (every trace in the window is measured; the
-- bounds prune partitions); the follow-up "show me this trace" lookup is
-- served by spans_trace_span_idx.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT trace_id,
       min(start_time) AS started,
       round((extract(epoch FROM max(end_time) - min(start_time)) * 1000)::numeric, 1) AS duration_ms,
       (array_agg(service_name || ' ' || span_name) FILTER (WHERE parent_span_id IS NULL))[1] AS root,
       count(*) AS spans,
       count(DISTINCT service_name) AS services,
       count(*) FILTER (WHERE status_code = 'Error') AS errors
FROM otel.spans
WHERE start_time > now() - interval '24 hours' AND start_time <= now()
GROUP BY trace_id
ORDER BY duration_ms DESC
LIMIT 20;
