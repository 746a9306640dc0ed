-- postgrescopy schema version 1: one table per signal, one per metric point type.
-- {{schema}} is replaced by the configured, quoted schema name.
--
-- Conventions shared by every table:
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
);

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
);

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
);

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
);

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
);

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
);

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
);

-- Indexes for the common lookups: a trace by id, and recent rows per service.
CREATE INDEX IF NOT EXISTS spans_trace_id_idx ON {{schema}}.spans (trace_id);
CREATE INDEX IF NOT EXISTS spans_service_time_idx ON {{schema}}.spans (service_name, start_time);
CREATE INDEX IF NOT EXISTS logs_service_time_idx ON {{schema}}.logs (service_name, "timestamp");
CREATE INDEX IF NOT EXISTS metrics_gauge_name_time_idx ON {{schema}}.metrics_gauge (metric_name, "time");
CREATE INDEX IF NOT EXISTS metrics_sum_name_time_idx ON {{schema}}.metrics_sum (metric_name, "time");
CREATE INDEX IF NOT EXISTS metrics_histogram_name_time_idx ON {{schema}}.metrics_histogram (metric_name, "time");
CREATE INDEX IF NOT EXISTS metrics_exponential_histogram_name_time_idx ON {{schema}}.metrics_exponential_histogram (metric_name, "time");
CREATE INDEX IF NOT EXISTS metrics_summary_name_time_idx ON {{schema}}.metrics_summary (metric_name, "time");
