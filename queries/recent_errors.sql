-- The 50 most recent errors
--
-- Answers: the latest failed spans with their service, operation, message and
-- trace id, to jump from a dashboard into a trace.
-- Index: spans_errors_idx, a partial index ON spans (start_time DESC) WHERE
-- status_code = 'Error': PostgreSQL walks its first 50 entries of the recent
-- partitions instead of reading and sorting every span (the article's 43x
-- speed-up on this query).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT start_time,
       service_name,
       span_name,
       status_message,
       span_attributes ->> 'error.type' AS error_type,
       trace_id
FROM otel.spans
WHERE status_code = 'Error'
  AND start_time > now() - interval '24 hours' AND start_time <= now()
ORDER BY start_time DESC
LIMIT 50;
