-- postgrescopy schema version 4: the two per-service indexes leave the index
-- set.
--
-- spans (service_name, start_time) and logs (service_name, severity_number,
-- "timestamp") were written for every span and log record, and no query of
-- queries/ uses them: on millions of rows every one of them reads its time
-- window's partitions whole (a sequential scan, the BRIN on spans.start_time
-- for the AI spend's open hour), and log severity groups by severity_text,
-- which the logs index lacks. They served only a service filter that no
-- shipped query, dashboard or view has. An install that filters by service
-- re-creates what it needs (see the README's Indexes section), e.g.
--   CREATE INDEX ON otel.spans_rows (service_name, start_time);
-- Dropping an index of a partitioned table drops its partitions' copies: a
-- catalog change and a file unlink each, instant at any size (it waits for
-- the queries reading the tables).

DROP INDEX IF EXISTS {{schema}}.spans_service_time_idx;
DROP INDEX IF EXISTS {{schema}}.logs_service_severity_time_idx;
