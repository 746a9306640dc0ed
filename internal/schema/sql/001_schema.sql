-- postgrescopy schema version 1: the first released schema.
-- {{schema}} is replaced by the configured, quoted schema name. Later versions
-- are further numbered files, applied in order under an advisory lock.
--
-- One table per signal, one per metric point type, each partitioned by range
-- of its time column. Its DEFAULT partition catches any row outside the
-- partitions made ahead of time (a clock at zero, a year-old replay): no
-- timestamp is ever refused. postgrescopy_maintain() below makes partitions
-- ahead of now and drops expired ones; the exporter calls it at start and on
-- a schedule. The index set is applied separately (indexes/indexes.sql).
--
-- Conventions shared by every signal table:
--   * times are timestamptz (microseconds); the sub-microsecond rest of the
--     OTLP nanosecond time is kept in the matching *_frac_ns column (0..999),
--     so time_unix_nano = extract(epoch from t) * 1e9 + frac (see README).
--   * trace ids are uuid (16 bytes), span ids bigint (8 bytes, same bits);
--     an absent (all-zero) id is NULL.
--   * uint32 flags and dropped counts are stored bit for bit in integer.
--   * attribute maps are jsonb with their value types kept.

CREATE TABLE IF NOT EXISTS {{schema}}.spans (
    start_time                        timestamptz NOT NULL,
    start_time_frac_ns                smallint    NOT NULL,
    end_time                          timestamptz NOT NULL,
    duration_ns                       bigint      NOT NULL,
    trace_id                          uuid,
    span_id                           bigint,
    parent_span_id                    bigint,
    trace_state                       text,
    flags                             integer     NOT NULL,
    service_name                      text,
    span_name                         text        NOT NULL,
    span_kind                         text        NOT NULL,
    status_code                       text        NOT NULL,
    status_message                    text,
    span_attributes                   jsonb       NOT NULL,
    events                            jsonb,
    links                             jsonb,
    dropped_attributes_count          integer     NOT NULL,
    dropped_events_count              integer     NOT NULL,
    dropped_links_count               integer     NOT NULL,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE (start_time);
CREATE TABLE IF NOT EXISTS {{schema}}.spans_default PARTITION OF {{schema}}.spans DEFAULT;

CREATE TABLE IF NOT EXISTS {{schema}}.logs (
    "timestamp"                       timestamptz NOT NULL,
    timestamp_frac_ns                 smallint    NOT NULL,
    observed_timestamp                timestamptz NOT NULL,
    observed_timestamp_frac_ns        smallint    NOT NULL,
    trace_id                          uuid,
    span_id                           bigint,
    flags                             integer     NOT NULL,
    severity_number                   integer     NOT NULL,
    severity_text                     text,
    service_name                      text,
    body                              jsonb,
    event_name                        text,
    log_attributes                    jsonb       NOT NULL,
    dropped_attributes_count          integer     NOT NULL,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE ("timestamp");
CREATE TABLE IF NOT EXISTS {{schema}}.logs_default PARTITION OF {{schema}}.logs DEFAULT;

-- Every metric table starts with the same columns; start_time is NULL when
-- the point has none (start_time_unix_nano = 0).
CREATE TABLE IF NOT EXISTS {{schema}}.metrics_gauge (
    "time"                            timestamptz NOT NULL,
    time_frac_ns                      smallint    NOT NULL,
    start_time                        timestamptz,
    start_time_frac_ns                smallint,
    service_name                      text,
    metric_name                       text        NOT NULL,
    description                       text,
    unit                              text,
    metric_metadata                   jsonb       NOT NULL,
    attributes                        jsonb       NOT NULL,
    exemplars                         jsonb,
    flags                             integer     NOT NULL,
    value                             double precision,
    value_int                         bigint,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE ("time");
CREATE TABLE IF NOT EXISTS {{schema}}.metrics_gauge_default PARTITION OF {{schema}}.metrics_gauge DEFAULT;

CREATE TABLE IF NOT EXISTS {{schema}}.metrics_sum (
    "time"                            timestamptz NOT NULL,
    time_frac_ns                      smallint    NOT NULL,
    start_time                        timestamptz,
    start_time_frac_ns                smallint,
    service_name                      text,
    metric_name                       text        NOT NULL,
    description                       text,
    unit                              text,
    metric_metadata                   jsonb       NOT NULL,
    attributes                        jsonb       NOT NULL,
    exemplars                         jsonb,
    flags                             integer     NOT NULL,
    value                             double precision,
    value_int                         bigint,
    is_monotonic                      boolean     NOT NULL,
    aggregation_temporality           text        NOT NULL,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE ("time");
CREATE TABLE IF NOT EXISTS {{schema}}.metrics_sum_default PARTITION OF {{schema}}.metrics_sum DEFAULT;

CREATE TABLE IF NOT EXISTS {{schema}}.metrics_histogram (
    "time"                            timestamptz NOT NULL,
    time_frac_ns                      smallint    NOT NULL,
    start_time                        timestamptz,
    start_time_frac_ns                smallint,
    service_name                      text,
    metric_name                       text        NOT NULL,
    description                       text,
    unit                              text,
    metric_metadata                   jsonb       NOT NULL,
    attributes                        jsonb       NOT NULL,
    exemplars                         jsonb,
    flags                             integer     NOT NULL,
    count                             bigint      NOT NULL,
    sum                               double precision,
    min                               double precision,
    max                               double precision,
    bucket_counts                     bigint[]    NOT NULL,
    explicit_bounds                   double precision[] NOT NULL,
    aggregation_temporality           text        NOT NULL,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE ("time");
CREATE TABLE IF NOT EXISTS {{schema}}.metrics_histogram_default PARTITION OF {{schema}}.metrics_histogram DEFAULT;

CREATE TABLE IF NOT EXISTS {{schema}}.metrics_exponential_histogram (
    "time"                            timestamptz NOT NULL,
    time_frac_ns                      smallint    NOT NULL,
    start_time                        timestamptz,
    start_time_frac_ns                smallint,
    service_name                      text,
    metric_name                       text        NOT NULL,
    description                       text,
    unit                              text,
    metric_metadata                   jsonb       NOT NULL,
    attributes                        jsonb       NOT NULL,
    exemplars                         jsonb,
    flags                             integer     NOT NULL,
    count                             bigint      NOT NULL,
    sum                               double precision,
    min                               double precision,
    max                               double precision,
    scale                             integer     NOT NULL,
    zero_count                        bigint      NOT NULL,
    zero_threshold                    double precision NOT NULL,
    positive_offset                   integer     NOT NULL,
    positive_bucket_counts            bigint[]    NOT NULL,
    negative_offset                   integer     NOT NULL,
    negative_bucket_counts            bigint[]    NOT NULL,
    aggregation_temporality           text        NOT NULL,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE ("time");
CREATE TABLE IF NOT EXISTS {{schema}}.metrics_exponential_histogram_default PARTITION OF {{schema}}.metrics_exponential_histogram DEFAULT;

CREATE TABLE IF NOT EXISTS {{schema}}.metrics_summary (
    "time"                            timestamptz NOT NULL,
    time_frac_ns                      smallint    NOT NULL,
    start_time                        timestamptz,
    start_time_frac_ns                smallint,
    service_name                      text,
    metric_name                       text        NOT NULL,
    description                       text,
    unit                              text,
    metric_metadata                   jsonb       NOT NULL,
    attributes                        jsonb       NOT NULL,
    exemplars                         jsonb,
    flags                             integer     NOT NULL,
    count                             bigint      NOT NULL,
    sum                               double precision NOT NULL,
    quantiles                         double precision[] NOT NULL,
    quantile_values                   double precision[] NOT NULL,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
) PARTITION BY RANGE ("time");
CREATE TABLE IF NOT EXISTS {{schema}}.metrics_summary_default PARTITION OF {{schema}}.metrics_summary DEFAULT;

-- The rejects table.
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

-- The batch ledger.
-- Each committed batch records here, in the same transaction as its rows, the
-- keys of the requests it came from (stream = the Redis stream key, or
-- 'direct' for direct writes). A redelivered entry or a retried request whose
-- key is already here was committed: it is acknowledged, not written again.
-- The primary key makes two replicas racing on one entry conflict instead of
-- both committing. Old rows are pruned.
CREATE TABLE IF NOT EXISTS {{schema}}.ledger (
    stream       text        NOT NULL,
    entry_id     text        NOT NULL,
    committed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (stream, entry_id)
);

CREATE INDEX IF NOT EXISTS ledger_committed_at_idx ON {{schema}}.ledger (committed_at);

-- The quarantine.
-- A Redis stream entry that cannot be read (its rows are cut, a compressed
-- table fails its checksum, it has no format) is not deleted: it is stored
-- here, bytes intact, in the same transaction as the batch it came with and
-- the ledger keys that acknowledge it, and only then removed from the stream.
--
--   stream      the Redis stream key
--   entry_id    the entry's stream id
--   ledger_key  its key in the ledger
--   format      the entry's format field ('copy1', '' when it has none)
--   reason      why it was refused
--   payload     the entry's bytes, exactly as read from Redis
CREATE TABLE IF NOT EXISTS {{schema}}.quarantine (
    quarantined_at timestamptz NOT NULL DEFAULT now(),
    stream         text        NOT NULL,
    entry_id       text        NOT NULL,
    ledger_key     text        NOT NULL,
    format         text        NOT NULL,
    reason         text        NOT NULL,
    payload        bytea       NOT NULL
);

CREATE INDEX IF NOT EXISTS quarantine_quarantined_at_idx ON {{schema}}.quarantine (quarantined_at);

-- postgrescopy_maintain makes the partitions of [now - p_interval, now +
-- p_premake × p_interval] that do not exist, and drops the partitions whose
-- whole range is older than p_retention (NULL keeps everything), and deletes
-- expired rows from the default partitions. Partition bounds are multiples of
-- p_interval since the Unix epoch, so replicas agree on them. It runs as its
-- owner (SECURITY DEFINER), so that a role that may only write can be granted
-- EXECUTE on it; it does nothing when another session is already running it.
-- It returns what it did, one row per partition.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_maintain(p_interval interval, p_premake integer, p_retention interval)
RETURNS TABLE (action text, partition_name text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $maintain$
DECLARE
    s   constant text := {{schema_lit}};
    t   record;
    p   record;
    step double precision := extract(epoch FROM p_interval);
    base timestamptz;
    lo  timestamptz;
    hi  timestamptz;
    name text;
    upper_bound timestamptz;
    n   bigint;
BEGIN
    IF step < 60 THEN
        RAISE EXCEPTION 'postgrescopy_maintain: interval % is shorter than a minute', p_interval;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('postgrescopy_maintain/' || s)) THEN
        RETURN;
    END IF;
    base := to_timestamp(floor(extract(epoch FROM now()) / step) * step);
    FOR t IN SELECT * FROM (VALUES
        ('spans', 'start_time'),
        ('logs', 'timestamp'),
        ('metrics_gauge', 'time'),
        ('metrics_sum', 'time'),
        ('metrics_histogram', 'time'),
        ('metrics_exponential_histogram', 'time'),
        ('metrics_summary', 'time')) AS v(tbl, col)
    LOOP
        FOR i IN -1..p_premake LOOP
            lo := base + i * p_interval;
            hi := lo + p_interval;
            name := t.tbl || '_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI');
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                                  WHERE ns.nspname = s AND c.relname = name);
            BEGIN
                EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                               s, name, s, t.tbl, lo, hi);
                action := 'created'; partition_name := name; detail := NULL;
                RETURN NEXT;
            EXCEPTION WHEN others THEN
                -- An overlapping partition (the interval was changed) or rows
                -- of that range already in the default partition: those rows
                -- stay where they are, and nothing is lost.
                action := 'skipped'; partition_name := name; detail := SQLERRM;
                RETURN NEXT;
            END;
        END LOOP;

        CONTINUE WHEN p_retention IS NULL;
        FOR p IN
            SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) AS bound
            FROM pg_inherits inh
            JOIN pg_class c ON c.oid = inh.inhrelid
            WHERE inh.inhparent = format('%I.%I', s, t.tbl)::regclass
        LOOP
            CONTINUE WHEN p.bound = 'DEFAULT';
            upper_bound := substring(p.bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
            IF upper_bound <= now() - p_retention THEN
                EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %I.%I', s, t.tbl, s, p.relname);
                EXECUTE format('DROP TABLE %I.%I', s, p.relname);
                action := 'dropped'; partition_name := p.relname; detail := NULL;
                RETURN NEXT;
            END IF;
        END LOOP;
        EXECUTE format('DELETE FROM %I.%I WHERE %I < $1', s, t.tbl || '_default', t.col) USING now() - p_retention;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            action := 'expired'; partition_name := t.tbl || '_default'; detail := n || ' rows';
            RETURN NEXT;
        END IF;
    END LOOP;
END
$maintain$;

-- Functions are executable by PUBLIC by default; this one drops partitions.
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_maintain(interval, integer, interval) FROM PUBLIC;
