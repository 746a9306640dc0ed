-- postgrescopy schema version 6: AI spend.
--
-- The GenAI conventions carry tokens and models, not money, so cost is
-- computed here: a price catalog (model_prices), a view giving every GenAI
-- call its cost and where that cost came from (gen_ai_calls), an hourly
-- rollup kept by postgrescopy_maintain (ai_spend_hourly, ai_token_metrics_hourly)
-- and views that read the rollup for the rolled-up hours and the raw spans
-- after them (ai_spend, ai_tokens).

-- model_prices is the price catalog. Prices are per million tokens in
-- currency. model is an exact model name, or with match = 'pattern' a LIKE
-- pattern ('gpt-4o-%'); provider NULL matches every provider. A call takes
-- the row valid at its start time [valid_from, valid_to), preferring an
-- exact match, then a named provider, then the longest pattern, then the
-- latest valid_from. A NULL cache or reasoning price falls back to the input
-- (cache) or output (reasoning) price. Rows with source = 'file' are the
-- operator's price file, replaced whole on every load; other rows are kept.
CREATE TABLE IF NOT EXISTS {{schema}}.model_prices (
    id                   bigserial   PRIMARY KEY,
    provider             text,
    model                text        NOT NULL,
    match                text        NOT NULL DEFAULT 'exact' CHECK (match IN ('exact', 'pattern')),
    input_per_mtok       numeric     NOT NULL CHECK (input_per_mtok >= 0),
    output_per_mtok      numeric     NOT NULL CHECK (output_per_mtok >= 0),
    cache_read_per_mtok  numeric     CHECK (cache_read_per_mtok >= 0),
    cache_write_per_mtok numeric     CHECK (cache_write_per_mtok >= 0),
    reasoning_per_mtok   numeric     CHECK (reasoning_per_mtok >= 0),
    currency             text        NOT NULL DEFAULT 'USD',
    valid_from           timestamptz NOT NULL DEFAULT '-infinity',
    valid_to             timestamptz NOT NULL DEFAULT 'infinity' CHECK (valid_to > valid_from),
    source               text        NOT NULL DEFAULT 'manual',
    origin               text,
    loaded_at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS model_prices_model_idx ON {{schema}}.model_prices (model, valid_from);

-- ai_spend_settings holds the cost attribution dimensions (what the rollup
-- groups by besides provider and model), the rollup's late window (how far
-- back each run recomputes, for late spans) and how far it has rolled up.
CREATE TABLE IF NOT EXISTS {{schema}}.ai_spend_settings (
    id          boolean     PRIMARY KEY DEFAULT true CHECK (id),
    dimensions  jsonb       NOT NULL DEFAULT '[]',
    late_window interval    NOT NULL DEFAULT '6 hours',
    rolled_to   timestamptz,
    view_sql    text
);
INSERT INTO {{schema}}.ai_spend_settings (id) VALUES (true) ON CONFLICT DO NOTHING;

-- ai_spend_hourly: one row per hour, provider, model, dimensions and
-- currency. cost is reported_cost plus the computed cost of the calls that
-- reported none; unpriced_calls had neither.
CREATE TABLE IF NOT EXISTS {{schema}}.ai_spend_hourly (
    hour                  timestamptz NOT NULL,
    provider              text,
    model                 text,
    dims                  jsonb       NOT NULL,
    currency              text,
    calls                 bigint      NOT NULL,
    reported_calls        bigint      NOT NULL,
    catalog_calls         bigint      NOT NULL,
    unpriced_calls        bigint      NOT NULL,
    error_calls           bigint      NOT NULL,
    duration_ns           bigint      NOT NULL,
    input_tokens          bigint      NOT NULL,
    uncached_input_tokens bigint      NOT NULL,
    cache_read_tokens     bigint      NOT NULL,
    cache_creation_tokens bigint      NOT NULL,
    output_tokens         bigint      NOT NULL,
    reasoning_tokens      bigint      NOT NULL,
    reported_cost         numeric     NOT NULL,
    computed_cost         numeric     NOT NULL,
    cost                  numeric     NOT NULL
);
CREATE INDEX IF NOT EXISTS ai_spend_hourly_hour_idx ON {{schema}}.ai_spend_hourly (hour);

-- ai_token_metrics_hourly: the gen_ai.client.token.usage histograms' token
-- sums per hour, provider, model and token type, apart from the span counts:
-- they also count calls whose spans were sampled away.
CREATE TABLE IF NOT EXISTS {{schema}}.ai_token_metrics_hourly (
    hour       timestamptz NOT NULL,
    provider   text,
    model      text,
    token_type text,
    tokens     double precision NOT NULL,
    points     bigint      NOT NULL
);
CREATE INDEX IF NOT EXISTS ai_token_metrics_hourly_hour_idx ON {{schema}}.ai_token_metrics_hourly (hour);

-- postgrescopy_ai_configure sets the cost attribution dimensions and the
-- late window, and rebuilds gen_ai_calls to compute the dimensions. Each
-- dimension is {"name": ..., "from": [{"scope": "span"|"resource", "key": ...}]}:
-- its value is the first key present, as text. Rolled-up hours keep the
-- dimensions they were computed with, except those the late window recomputes.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_configure(p_dimensions jsonb, p_late_window interval)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $configure$
DECLARE
    s    constant text := {{schema_lit}};
    d    jsonb;
    src  jsonb;
    args text[] := '{}';
    keys text[];
    expr text;
    c    text[];
    col  record;
    v    text;
BEGIN
    -- Replicas starting together would replace the view at once ("tuple
    -- concurrently updated"): one at a time, the next one finding it done.
    PERFORM pg_advisory_xact_lock(hashtext('postgrescopy_ai_configure/' || s));
    -- The genai preset's columns, or NULL for those the spans table lacks
    -- (promote_preset: none, or a column of another type): the exporter adds
    -- them at start and then calls this function again.
    FOR col IN SELECT * FROM (VALUES
        ('gen_ai_provider_name', 'text'), ('gen_ai_operation_name', 'text'),
        ('gen_ai_request_model', 'text'), ('gen_ai_response_model', 'text'),
        ('gen_ai_input_tokens', 'bigint'), ('gen_ai_output_tokens', 'bigint'),
        ('gen_ai_cost_usd', 'double precision'), ('gen_ai_cache_read_input_tokens', 'bigint'),
        ('gen_ai_cache_creation_input_tokens', 'bigint'), ('gen_ai_reasoning_output_tokens', 'bigint'),
        ('gen_ai_conversation_id', 'text'), ('gen_ai_agent_name', 'text')) AS v(name, typ)
    LOOP
        IF EXISTS (SELECT 1 FROM pg_attribute a
                   WHERE a.attrelid = format('%I.spans', s)::regclass AND a.attname = col.name
                     AND NOT a.attisdropped AND format_type(a.atttypid, a.atttypmod) = col.typ) THEN
            c := c || format('s.%I', col.name);
        ELSE
            c := c || format('NULL::%s', col.typ);
        END IF;
    END LOOP;

    IF jsonb_typeof(p_dimensions) <> 'array' THEN
        RAISE EXCEPTION 'postgrescopy_ai_configure: dimensions must be a JSON array, not %', jsonb_typeof(p_dimensions);
    END IF;
    FOR d IN SELECT * FROM jsonb_array_elements(p_dimensions) LOOP
        keys := '{}';
        IF coalesce(d->>'name', '') = '' OR jsonb_typeof(d->'from') IS DISTINCT FROM 'array' THEN
            RAISE EXCEPTION 'postgrescopy_ai_configure: dimension % needs a name and a from array', d;
        END IF;
        FOR src IN SELECT * FROM jsonb_array_elements(d->'from') LOOP
            CASE src->>'scope'
                WHEN 'span' THEN keys := keys || format('s.span_attributes ->> %L', src->>'key');
                WHEN 'resource' THEN keys := keys || format('s.resource_attributes ->> %L', src->>'key');
                ELSE RAISE EXCEPTION 'postgrescopy_ai_configure: dimension %: scope % is not span or resource', d->>'name', src->>'scope';
            END CASE;
        END LOOP;
        IF cardinality(keys) = 0 THEN
            RAISE EXCEPTION 'postgrescopy_ai_configure: dimension % has no key', d->>'name';
        END IF;
        args := args || format('%L, coalesce(%s)', d->>'name', array_to_string(keys, ', '));
    END LOOP;
    IF cardinality(args) = 0 THEN
        expr := '''{}''::jsonb';
    ELSE
        expr := format('jsonb_build_object(%s)', array_to_string(args, ', '));
    END IF;

    -- gen_ai_spans: every span with a GenAI operation, model or token count
    -- is a call,
    -- except SERVER spans: an LLM proxy's server span repeats the totals of
    -- the client calls it makes. Input tokens include the cached ones (the
    -- conventions' definition), so the uncached rest is priced at the input
    -- rate and the cached tokens at theirs; reasoning tokens are part of the
    -- output tokens likewise. gen_ai_calls adds each call's price and cost
    -- (a catalog look-up per call: read gen_ai_spans when cost is not needed).
    v := replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(replace(
        format($view$
CREATE OR REPLACE VIEW %1$I.gen_ai_spans AS
SELECT s.start_time, s.end_time, s.duration_ns, s.trace_id, s.span_id, s.service_name, s.span_name,
       s.span_kind, s.status_code, s.status_message,
       {{c1}} AS provider,
       coalesce({{c4}}, {{c3}}) AS model,
       {{c2}} AS operation,
       {{c11}} AS conversation_id,
       {{c12}} AS agent_name,
       %2$s AS dims,
       {{c5}} AS input_tokens,
       greatest({{c5}} - coalesce({{c8}}, 0)
                - coalesce({{c9}}, 0), 0) AS uncached_input_tokens,
       {{c8}} AS cache_read_tokens,
       {{c9}} AS cache_creation_tokens,
       {{c6}} AS output_tokens,
       {{c10}} AS reasoning_tokens,
       {{c7}}::numeric AS reported_cost,
       s.span_attributes, s.resource_attributes
FROM %1$I.spans s
WHERE s.span_kind <> 'Server'
  AND ({{c2}} IS NOT NULL OR {{c3}} IS NOT NULL
       OR {{c4}} IS NOT NULL OR {{c5}} IS NOT NULL
       OR {{c6}} IS NOT NULL OR {{c7}} IS NOT NULL);
CREATE OR REPLACE VIEW %1$I.gen_ai_calls AS
SELECT c.*,
       CASE WHEN c.reported_cost IS NOT NULL THEN 'reported'
            WHEN c.computed_cost IS NOT NULL THEN 'catalog'
            ELSE 'unpriced' END AS cost_source,
       coalesce(c.reported_cost, c.computed_cost) AS cost
FROM (
    SELECT t.*,
           CASE WHEN p.id IS NOT NULL AND (t.input_tokens IS NOT NULL OR t.output_tokens IS NOT NULL) THEN
               (coalesce(t.uncached_input_tokens, 0) * p.input_per_mtok
                + coalesce(t.cache_read_tokens, 0) * coalesce(p.cache_read_per_mtok, p.input_per_mtok)
                + coalesce(t.cache_creation_tokens, 0) * coalesce(p.cache_write_per_mtok, p.input_per_mtok)
                + greatest(coalesce(t.output_tokens, 0) - coalesce(t.reasoning_tokens, 0), 0) * p.output_per_mtok
                + least(coalesce(t.reasoning_tokens, 0), coalesce(t.output_tokens, t.reasoning_tokens, 0))
                  * coalesce(p.reasoning_per_mtok, p.output_per_mtok)) / 1000000
           END AS computed_cost,
           CASE WHEN t.reported_cost IS NOT NULL THEN 'USD' ELSE p.currency END AS currency,
           p.id AS price_id
    FROM %1$I.gen_ai_spans t
    LEFT JOIN LATERAL (
        SELECT mp.* FROM %1$I.model_prices mp
        WHERE (mp.provider IS NULL OR mp.provider = t.provider)
          AND CASE mp.match WHEN 'exact' THEN mp.model = t.model ELSE t.model LIKE mp.model END
          AND t.start_time >= mp.valid_from AND t.start_time < mp.valid_to
        ORDER BY mp.match = 'exact' DESC, mp.provider IS NOT NULL DESC, length(mp.model) DESC, mp.valid_from DESC, mp.id DESC
        LIMIT 1
    ) p ON true
) c
$view$, s, expr), '{{c12}}', c[12]), '{{c11}}', c[11]), '{{c10}}', c[10]), '{{c9}}', c[9]), '{{c8}}', c[8]), '{{c7}}', c[7]), '{{c6}}', c[6]), '{{c5}}', c[5]), '{{c4}}', c[4]), '{{c3}}', c[3]), '{{c2}}', c[2]), '{{c1}}', c[1]);
    -- Replacing the view waits for the queries reading it, and queues the
    -- next ones behind it: done only when it changes.
    IF v IS DISTINCT FROM (SELECT view_sql FROM {{schema}}.ai_spend_settings)
       OR to_regclass(format('%I.gen_ai_calls', s)) IS NULL THEN
        EXECUTE v;
    END IF;


    UPDATE {{schema}}.ai_spend_settings
    SET dimensions = p_dimensions, late_window = coalesce(p_late_window, late_window), view_sql = v;
END
$configure$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_configure(jsonb, interval) FROM PUBLIC;

SELECT {{schema}}.postgrescopy_ai_configure('[]', NULL);

-- ai_spend_aggregate is the one aggregate both the rollup and the live view
-- use, so that they cannot drift: calls in [p_from, p_to) per hour. Dynamic
-- SQL, so that each call is planned with its bounds: only their partitions
-- are read, and the open hour's few rows are not planned as a third of the
-- table (a parallel scan of every partition).
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_aggregate(p_from timestamptz, p_to timestamptz)
RETURNS SETOF {{schema}}.ai_spend_hourly
LANGUAGE plpgsql STABLE
AS $agg$
BEGIN
    RETURN QUERY EXECUTE format($q$
    SELECT date_trunc('hour', c.start_time, 'UTC'), c.provider, c.model, c.dims, c.currency,
           count(*),
           count(*) FILTER (WHERE c.cost_source = 'reported'),
           count(*) FILTER (WHERE c.cost_source = 'catalog'),
           count(*) FILTER (WHERE c.cost_source = 'unpriced'),
           count(*) FILTER (WHERE c.status_code = 'Error'),
           coalesce(sum(c.duration_ns), 0)::bigint,
           coalesce(sum(c.input_tokens), 0)::bigint,
           coalesce(sum(c.uncached_input_tokens), 0)::bigint,
           coalesce(sum(c.cache_read_tokens), 0)::bigint,
           coalesce(sum(c.cache_creation_tokens), 0)::bigint,
           coalesce(sum(c.output_tokens), 0)::bigint,
           coalesce(sum(c.reasoning_tokens), 0)::bigint,
           coalesce(sum(c.reported_cost), 0),
           coalesce(sum(c.computed_cost) FILTER (WHERE c.cost_source = 'catalog'), 0),
           coalesce(sum(c.cost), 0)
    FROM %I.gen_ai_calls c
    WHERE c.start_time >= %L AND c.start_time < %L
    GROUP BY 1, 2, 3, 4, 5$q$, {{schema_lit}}, p_from, p_to);
END
$agg$;

-- The open hour is read raw on every ai_spend query: a BRIN index finds the
-- latest pages of the spans without scanning the day's partition, and costs
-- next to nothing on ingest (spans arrive in about time order).
CREATE INDEX IF NOT EXISTS spans_start_time_brin ON {{schema}}.spans USING brin (start_time);

-- postgrescopy_ai_rollup recomputes the rollup's hours in [p_from, p_to)
-- from the raw rows: delete, then insert, in the caller's transaction. Call
-- it by hand after replaying spans older than the late window; it does not
-- move rolled_to.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_rollup(p_from timestamptz, p_to timestamptz)
RETURNS bigint
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $rollup$
DECLARE
    n bigint;
    m bigint;
BEGIN
    p_from := date_trunc('hour', p_from, 'UTC');
    p_to := date_trunc('hour', p_to, 'UTC');
    IF p_from >= p_to THEN
        RETURN 0;
    END IF;
    DELETE FROM {{schema}}.ai_spend_hourly WHERE hour >= p_from AND hour < p_to;
    INSERT INTO {{schema}}.ai_spend_hourly SELECT * FROM {{schema}}.ai_spend_aggregate(p_from, p_to);
    GET DIAGNOSTICS n = ROW_COUNT;

    -- Token histograms: a Delta point's sum is its own; a Cumulative point's
    -- is the rise since the previous point of its series (same start time),
    -- looked for up to a day before the range.
    DELETE FROM {{schema}}.ai_token_metrics_hourly WHERE hour >= p_from AND hour < p_to;
    INSERT INTO {{schema}}.ai_token_metrics_hourly
    SELECT date_trunc('hour', x.time, 'UTC'), x.provider, x.model, x.token_type, sum(x.tokens), count(*)
    FROM (
        SELECT h.time,
               coalesce(h.attributes ->> 'gen_ai.provider.name', h.attributes ->> 'gen_ai.system') AS provider,
               coalesce(h.attributes ->> 'gen_ai.response.model', h.attributes ->> 'gen_ai.request.model') AS model,
               h.attributes ->> 'gen_ai.token.type' AS token_type,
               CASE WHEN h.aggregation_temporality = 'Cumulative' THEN
                   h.sum - coalesce(lag(h.sum) OVER (PARTITION BY h.service_name, h.attributes, h.resource_attributes, h.start_time ORDER BY h.time), 0)
               ELSE h.sum END AS tokens
        FROM {{schema}}.metrics_histogram h
        WHERE h.metric_name = 'gen_ai.client.token.usage'
          AND h.time >= p_from - interval '1 day' AND h.time < p_to
    ) x
    WHERE x.time >= p_from AND x.tokens IS NOT NULL
    GROUP BY 1, 2, 3, 4;
    GET DIAGNOSTICS m = ROW_COUNT;
    RETURN n + m;
END
$rollup$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_rollup(timestamptz, timestamptz) FROM PUBLIC;

-- postgrescopy_maintain now rolls up AI spend before it drops partitions:
-- the partition work moves to postgrescopy_maintain_partitions (renamed,
-- unchanged), and the new postgrescopy_maintain, same signature, does the
-- rollup and then calls it. Each run recomputes the closed hours from the
-- late window before the last rolled-up hour, but never an hour that
-- retention may already have emptied; the rollup itself is kept forever.
ALTER FUNCTION {{schema}}.postgrescopy_maintain(interval, integer, interval) RENAME TO postgrescopy_maintain_partitions;

CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_maintain(p_interval interval, p_premake integer, p_retention interval)
RETURNS TABLE (action text, partition_name text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $maintain$
DECLARE
    s     constant text := {{schema_lit}};
    st    record;
    lo    timestamptz;
    hi    timestamptz := date_trunc('hour', now(), 'UTC');
    n     bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('postgrescopy_maintain/' || s)) THEN
        RETURN;
    END IF;
    SELECT * INTO st FROM {{schema}}.ai_spend_settings FOR UPDATE;
    -- Promoted columns added since (the exporter adds them after the
    -- migrations) enter the cost view.
    PERFORM {{schema}}.postgrescopy_ai_configure(st.dimensions, NULL);
    IF st.rolled_to IS NULL THEN
        SELECT min(start_time) INTO lo FROM {{schema}}.spans;
    ELSE
        lo := least(st.rolled_to, hi) - st.late_window;
    END IF;
    IF p_retention IS NOT NULL THEN
        lo := greatest(lo, date_trunc('hour', now() - p_retention, 'UTC') + interval '1 hour');
    END IF;
    lo := coalesce(lo, hi);
    n := {{schema}}.postgrescopy_ai_rollup(lo, hi);
    UPDATE {{schema}}.ai_spend_settings SET rolled_to = hi;
    IF n > 0 THEN
        action := 'rolled_up'; partition_name := 'ai_spend_hourly';
        detail := n || ' rows from ' || to_char(date_trunc('hour', lo, 'UTC') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"');
        RETURN NEXT;
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}.postgrescopy_maintain_partitions(p_interval, p_premake, p_retention);
END
$maintain$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_maintain(interval, integer, interval) FROM PUBLIC;

-- Whoever could run the old function can run the new one.
DO $grants$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole::text AS role
        FROM pg_proc p, aclexplode(p.proacl) a
        WHERE p.oid = '{{schema}}.postgrescopy_maintain_partitions(interval, integer, interval)'::regprocedure
          AND a.privilege_type = 'EXECUTE' AND a.grantee <> 0 AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('GRANT EXECUTE ON FUNCTION %I.postgrescopy_maintain(interval, integer, interval) TO %s', {{schema_lit}}, r.role);
    END LOOP;
END
$grants$;

-- ai_spend: the rollup for the hours it holds, the raw calls after them.
-- Queries read this and filter hour; the open hour is always live.
CREATE OR REPLACE VIEW {{schema}}.ai_spend AS
SELECT h.* FROM {{schema}}.ai_spend_hourly h
WHERE h.hour < (SELECT coalesce(rolled_to, '-infinity') FROM {{schema}}.ai_spend_settings)
UNION ALL
SELECT a.* FROM {{schema}}.ai_spend_aggregate(
    (SELECT coalesce(rolled_to, '-infinity') FROM {{schema}}.ai_spend_settings), 'infinity') a;

-- ai_tokens: tokens per hour, provider, model and kind, from the spans
-- (source 'spans') and, apart, from the token usage histograms ('metrics').
CREATE OR REPLACE VIEW {{schema}}.ai_tokens AS
SELECT a.hour, a.provider, a.model, k.token_type, 'spans'::text AS source, sum(k.tokens)::double precision AS tokens
FROM {{schema}}.ai_spend a
CROSS JOIN LATERAL (VALUES ('uncached_input', a.uncached_input_tokens), ('cache_read', a.cache_read_tokens),
                           ('cache_creation', a.cache_creation_tokens),
                           ('output', a.output_tokens - a.reasoning_tokens), ('reasoning', a.reasoning_tokens)) AS k(token_type, tokens)
GROUP BY 1, 2, 3, 4
UNION ALL
SELECT m.hour, m.provider, m.model, m.token_type, 'metrics', sum(m.tokens)
FROM {{schema}}.ai_token_metrics_hourly m
GROUP BY 1, 2, 3, 4;
