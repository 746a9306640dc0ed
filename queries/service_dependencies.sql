-- Service dependency map
--
-- Answers: which service calls which (a child span whose parent span belongs
-- to another service), how often, how many of those calls failed, and the
-- callee's p95 latency, over the last 24 hours.
-- Index: spans_trace_span_idx (trace_id, span_id) serves the parent lookup of
-- the self-join (parent.trace_id = child.trace_id AND parent.span_id =
-- child.parent_span_id) as a nested loop; over a large window the planner
-- prefers a hash join. The window's bounds prune partitions on both sides.
-- This is the article's slowest query.
-- Schema: `otel.` is the exporter's default schema; cmd/bench rewrites it.
SELECT parent.service_name AS caller,
       child.service_name  AS callee,
       count(*)            AS calls,
       count(*) FILTER (WHERE child.status_code = 'Error') AS errors,
       round((percentile_cont(0.95) WITHIN GROUP (ORDER BY child.duration_ns) / 1e6)::numeric, 2) AS callee_p95_ms
FROM otel.spans AS child
JOIN otel.spans AS parent
  ON parent.trace_id = child.trace_id
 AND parent.span_id = child.parent_span_id
WHERE child.start_time > now() - interval '24 hours' AND child.start_time <= now()
  AND parent.start_time > now() - interval '25 hours' AND parent.start_time <= now()
  AND child.parent_span_id IS NOT NULL
  AND parent.service_name IS DISTINCT FROM child.service_name
GROUP BY parent.service_name, child.service_name
ORDER BY calls DESC, caller, callee;
