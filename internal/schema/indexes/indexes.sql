-- The indexes that serve queries/ (on by default; `indexes: false` drops
-- them). Each statement is one index, created on the partitioned parent (the
-- table that stores the rows: spans_rows under the spans view), so
-- PostgreSQL builds it on every partition. Their ingest cost is measured by
-- `make bench` (part "indexes") and reported in the README.

-- The 50 most recent errors: a small partial index, newest first.
CREATE INDEX IF NOT EXISTS spans_errors_idx ON {{schema}}.spans_rows (start_time DESC) WHERE status_code = 'Error';
-- A trace by id, and the parent/child join on (trace_id, parent_span_id = span_id).
CREATE INDEX IF NOT EXISTS spans_trace_span_idx ON {{schema}}.spans_rows (trace_id, span_id);
-- Spans of a service over time: the Jaeger storage extension's searches by
-- service and time range, its list of services (a loose scan of the leading
-- column) and of a service's operations (span_name and span_kind are
-- included, so that list is an index-only scan).
CREATE INDEX IF NOT EXISTS spans_service_start_idx ON {{schema}}.spans_rows (service_name, start_time) INCLUDE (span_name, span_kind);
-- The logs of a trace.
CREATE INDEX IF NOT EXISTS logs_trace_idx ON {{schema}}.logs_rows (trace_id) WHERE trace_id IS NOT NULL;
-- A metric series over time.
CREATE INDEX IF NOT EXISTS metrics_gauge_series_idx ON {{schema}}.metrics_gauge_rows (metric_name, service_name, "time");
CREATE INDEX IF NOT EXISTS metrics_sum_series_idx ON {{schema}}.metrics_sum_rows (metric_name, service_name, "time");
CREATE INDEX IF NOT EXISTS metrics_histogram_series_idx ON {{schema}}.metrics_histogram_rows (metric_name, service_name, "time");
CREATE INDEX IF NOT EXISTS metrics_exponential_histogram_series_idx ON {{schema}}.metrics_exponential_histogram_rows (metric_name, service_name, "time");
CREATE INDEX IF NOT EXISTS metrics_summary_series_idx ON {{schema}}.metrics_summary_rows (metric_name, service_name, "time");
