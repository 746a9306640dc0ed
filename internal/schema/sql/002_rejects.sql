-- postgrescopy schema version 2: the rejects table.
-- A row that PostgreSQL refuses even after sanitization (a CHECK or a trigger,
-- a partition that does not exist, a value over a server limit) is isolated
-- from its batch and stored here, in the same transaction as the batch's
-- other rows, rather than failing the batch or being lost.
--
--   signal, table_name  where the row was going (traces/spans, logs/logs,
--                       metrics/metrics_*)
--   sqlstate, error,    PostgreSQL's refusal; detail is cut to 1 kB
--   detail
--   row_json            the row as a JSON object of its columns, which
--                       jsonb_populate_record reads back; NULL only when
--                       jsonb refused the rendering too
--   tuple               the row exactly as sent: one binary COPY tuple
--
-- Replaying rows once the cause is fixed (see docs/sanitization.md):
--   INSERT INTO otel.spans
--   SELECT (jsonb_populate_record(NULL::otel.spans, row_json)).* FROM otel.rejects
--   WHERE table_name = 'spans';
CREATE TABLE IF NOT EXISTS {{schema}}.rejects (
    rejected_at timestamptz NOT NULL DEFAULT now(),
    signal      text        NOT NULL,
    table_name  text        NOT NULL,
    sqlstate    text        NOT NULL,
    error       text        NOT NULL,
    detail      text,
    row_json    jsonb,
    tuple       bytea       NOT NULL
);

CREATE INDEX IF NOT EXISTS rejects_rejected_at_idx ON {{schema}}.rejects (rejected_at);
