-- Error-rate breakdown
--
-- Answers: for each service and operation, how many spans failed over the
-- last 24 hours, the error rate, and the most common error.type attribute
-- (429, 500, 503, timeout, 40P01...), worst rate first.
-- Index: the window's two bounds prune every partition but the recent ones;
-- the error types come from the errors alone, through spans_errors_idx (the
-- partial index of failed spans): only their span_attributes are read (a
-- GenAI span's are kilobytes of TOAST to decompress). Counted in one pass
-- with mode() over every span, PostgreSQL sorts every span of the window,
-- attributes and all, on disk. With a service_name filter over a short
-- window, an index of your own on spans_rows (service_name, start_time)
-- serves it (README, Indexes).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
WITH counts AS (
    SELECT service_name,
           span_name,
           count(*) AS spans,
           count(*) FILTER (WHERE status_code = 'Error') AS errors
    FROM otel.spans
    WHERE start_time > now() - interval '24 hours' AND start_time <= now()
    GROUP BY service_name, span_name
    HAVING count(*) FILTER (WHERE status_code = 'Error') > 0
), error_types AS (
    SELECT service_name,
           span_name,
           mode() WITHIN GROUP (ORDER BY span_attributes ->> 'error.type') AS top_error_type
    FROM otel.spans
    WHERE status_code = 'Error'
      AND start_time > now() - interval '24 hours' AND start_time <= now()
    GROUP BY service_name, span_name
)
SELECT c.service_name,
       c.span_name,
       c.spans,
       c.errors,
       round(100.0 * c.errors / c.spans, 2) AS error_pct,
       t.top_error_type
FROM counts c
JOIN error_types t USING (service_name, span_name)
ORDER BY error_pct DESC, errors DESC, service_name, span_name;
