-- A metric series over time
--
-- Answers: per minute over the last 3 hours, the average and lowest
-- remaining rate-limit tokens the LLM proxy saw (the gauge
-- llm_proxy.rate_limit.remaining_tokens), per service, as a chart would plot it.
-- Index: metrics_gauge_series_idx (metric_name, service_name, "time"): a
-- range scan on one metric name in the recent partitions.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT date_trunc('minute', "time") AS minute,
       service_name,
       count(*) AS points,
       round(avg(coalesce(value, value_int))::numeric, 1) AS avg_remaining,
       min(coalesce(value, value_int)) AS min_remaining
FROM otel.metrics_gauge
WHERE metric_name = 'llm_proxy.rate_limit.remaining_tokens'
  AND "time" > now() - interval '3 hours' AND "time" <= now()
GROUP BY 1, 2
ORDER BY 1, 2;
