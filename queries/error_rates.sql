-- Error-rate breakdown
--
-- Answers: for each service and operation, how many spans failed over the
-- last 24 hours, the error rate, and the most common error.type attribute
-- (429, 500, 503, timeout, 40P01...), worst rate first.
-- Index: the window's two bounds prune every partition but the recent ones,
-- which it reads whole; with a service_name filter over a short window, an
-- index of your own on spans_rows (service_name, start_time) serves it
-- (README, Indexes).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT service_name,
       span_name,
       count(*) AS spans,
       count(*) FILTER (WHERE status_code = 'Error') AS errors,
       round(100.0 * count(*) FILTER (WHERE status_code = 'Error') / count(*), 2) AS error_pct,
       mode() WITHIN GROUP (ORDER BY span_attributes ->> 'error.type')
           FILTER (WHERE status_code = 'Error') AS top_error_type
FROM otel.spans
WHERE start_time > now() - interval '24 hours' AND start_time <= now()
GROUP BY service_name, span_name
HAVING count(*) FILTER (WHERE status_code = 'Error') > 0
ORDER BY error_pct DESC, errors DESC, service_name, span_name;
