-- Log severity distribution per service
--
-- Answers: how many log records each service wrote at each severity over the
-- last 24 hours, and each severity's share of the service's logs.
-- Index: the window's two bounds prune every partition but the recent ones,
-- which it reads whole (it counts every record of the window).
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT service_name,
       coalesce(severity_text, 'UNSET') AS severity,
       count(*) AS records,
       round(100.0 * count(*) / sum(count(*)) OVER (PARTITION BY service_name), 2) AS pct_of_service
FROM otel.logs
WHERE "timestamp" > now() - interval '24 hours' AND "timestamp" <= now()
GROUP BY service_name, coalesce(severity_text, 'UNSET'), severity_number
ORDER BY service_name, severity_number;
