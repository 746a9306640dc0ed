-- postgrescopy schema version 12: the AI spend partials per hour too.
--
-- ai_spend_partial holds a row per group and minute: about as many rows a
-- minute as there are groups (provider, model, dimensions, team, span
-- kind), so a reader of a day sums 1,440 rows per group, and the token
-- cost over 24 hours took hundreds of milliseconds once the groups
-- numbered in the hundreds. ai_spend_partial_hour holds the same sums per
-- UTC hour, kept with the minutes:
--
-- * the capture inserts a COPY's groups into both, in one statement;
-- * postgrescopy_ai_compact, which merges the minutes from a time on,
--   remakes the hours from that hour on from the merged minutes;
-- * a recomputation of the partials (postgrescopy_ai_partials) remakes the
--   hours from partial_from's hour on;
-- * postgrescopy_maintain deletes the hours of the minutes it deletes at
--   the retention and remakes the hour it cuts.
--
-- So an hour's row of a group always sums the group's minute rows of that
-- hour. ai_spend_groups(..., p_hours true) reads an hour's rows, and
-- answers one row per group for the hour, when every group of the hour is
-- inside the range, the hour is at or after partial_from and no price
-- boundary falls inside it, nor a day boundary of the session's time zone
-- (a zone whose offset is not whole hours); else that hour's minutes as
-- before (raw where a bound or price boundary falls inside a group), per
-- minute. So its answer can be grouped by hour, or by day in any zone. The
-- token cost query and ai_spend read it so; ai_spend_groups without p_hours
-- answers per minute as before.
-- Citus keeps partials off (partial_from infinity): the table stays empty.

CREATE TABLE IF NOT EXISTS {{schema}}.ai_spend_partial_hour (
    hour                  timestamptz NOT NULL, -- UTC
    min_start             timestamptz NOT NULL,
    max_start             timestamptz NOT NULL,
    provider              text,
    model                 text,
    dims                  jsonb       NOT NULL,
    team                  text,
    span_kind             text,
    has_input             boolean     NOT NULL,
    has_tokens            boolean     NOT NULL,
    reported              boolean     NOT NULL,
    calls                 bigint      NOT NULL,
    error_calls           bigint      NOT NULL,
    duration_ns           bigint      NOT NULL,
    input_tokens          bigint      NOT NULL,
    uncached_input_tokens bigint      NOT NULL,
    cache_read_tokens     bigint      NOT NULL,
    cache_creation_tokens bigint      NOT NULL,
    output_tokens         bigint      NOT NULL,
    reasoning_tokens      bigint      NOT NULL,
    priced_output_tokens  bigint      NOT NULL,
    priced_reasoning_tokens bigint    NOT NULL,
    reported_cost         numeric     NOT NULL
);
CREATE INDEX IF NOT EXISTS ai_spend_partial_hour_hour_idx ON {{schema}}.ai_spend_partial_hour (hour);

-- Who may read the minutes may read the hours (ai_spend_groups runs as its
-- caller).
DO $grants$
DECLARE
    g record;
BEGIN
    FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role
             FROM pg_class cl, aclexplode(cl.relacl) a
             WHERE cl.oid = '{{schema}}.ai_spend_partial'::regclass
               AND a.grantee <> 0 AND a.grantee <> cl.relowner AND a.privilege_type = 'SELECT' LOOP
        EXECUTE format('GRANT SELECT ON {{schema}}.ai_spend_partial_hour TO %s', g.role);
    END LOOP;
END
$grants$;

-- postgrescopy_ai_hours remakes the hour rows of the hours from p_from's
-- to p_to (excluded) from the minute rows, in one statement: one snapshot,
-- so that a COPY committing meanwhile is in both or in neither.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_hours(p_from timestamptz, p_to timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $hours$
    WITH d AS (DELETE FROM {{schema}}.ai_spend_partial_hour
               WHERE hour >= date_trunc('hour', p_from, 'UTC') AND hour < p_to)
    INSERT INTO {{schema}}.ai_spend_partial_hour
    SELECT date_trunc('hour', minute, 'UTC'), min(min_start), max(max_start), provider, model, dims, team, span_kind,
           has_input, has_tokens, reported,
           sum(calls), sum(error_calls), sum(duration_ns), sum(input_tokens), sum(uncached_input_tokens),
           sum(cache_read_tokens), sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens),
           sum(priced_output_tokens), sum(priced_reasoning_tokens), sum(reported_cost)
    FROM {{schema}}.ai_spend_partial
    WHERE minute >= date_trunc('hour', p_from, 'UTC') AND minute < p_to
    GROUP BY 1, provider, model, dims, team, span_kind, has_input, has_tokens, reported
$hours$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_hours(timestamptz, timestamptz) FROM PUBLIC;

-- postgrescopy_ai_compact: as in version 5, and the hours follow.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_compact(p_from timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $compact$
BEGIN
    WITH d AS (DELETE FROM {{schema}}.ai_spend_partial WHERE minute >= p_from RETURNING *)
    INSERT INTO {{schema}}.ai_spend_partial
    SELECT minute, min(min_start), max(max_start), provider, model, dims, team, span_kind, has_input, has_tokens, reported,
           sum(calls), sum(error_calls), sum(duration_ns), sum(input_tokens), sum(uncached_input_tokens),
           sum(cache_read_tokens), sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens),
           sum(priced_output_tokens), sum(priced_reasoning_tokens), sum(reported_cost)
    FROM d GROUP BY minute, provider, model, dims, team, span_kind, has_input, has_tokens, reported;
    PERFORM {{schema}}.postgrescopy_ai_hours(p_from, 'infinity');
END
$compact$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_compact(timestamptz) FROM PUBLIC;

-- postgrescopy_ai_capture_make: as in version 9, the COPY's groups
-- inserted per hour as well, in the same statement (its aggregation once).
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_capture_make()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $make$
DECLARE
    s     constant text := {{schema_lit}};
    calls constant text := (SELECT st.partial_sql FROM {{schema}}.ai_spend_settings st);
    cols  text;
BEGIN
    IF calls IS NULL THEN
        RAISE EXCEPTION 'postgrescopy_ai_capture_make: no calls text stored (ai_spend_settings.partial_sql)';
    END IF;
    SELECT string_agg(a.expr, ', ' ORDER BY a.attnum) INTO cols
    FROM {{schema}}.postgrescopy_read_columns(format('%I.spans_rows', s)::regclass) a
    WHERE a.attname NOT IN ('resource_attributes', 'context_id');
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.postgrescopy_ai_capture() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
    n bigint;
BEGIN
    WITH m (minute, min_start, max_start, provider, model, dims, team, span_kind, has_input, has_tokens, reported,
            calls, error_calls, duration_ns, input_tokens, uncached_input_tokens, cache_read_tokens,
            cache_creation_tokens, output_tokens, reasoning_tokens, priced_output_tokens, priced_reasoning_tokens,
            reported_cost) AS (%2$s),
    h AS (
        INSERT INTO %1$I.ai_spend_partial_hour
        SELECT date_trunc('hour', minute, 'UTC'), min(min_start), max(max_start), provider, model, dims, team, span_kind,
               has_input, has_tokens, reported,
               sum(calls), sum(error_calls), sum(duration_ns), sum(input_tokens), sum(uncached_input_tokens),
               sum(cache_read_tokens), sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens),
               sum(priced_output_tokens), sum(priced_reasoning_tokens), sum(reported_cost)
        FROM m GROUP BY 1, provider, model, dims, team, span_kind, has_input, has_tokens, reported
    )
    INSERT INTO %1$I.ai_spend_partial SELECT * FROM m;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- Each COPY adds a row per group and minute its calls fall in. A COPY
    -- merges the late window's rows into one per group and minute with the
    -- chance of its rows over the table's (at least 1,000): about once the
    -- table has doubled, so that each row is rewritten a few times at most
    -- and readers sum about a row per group and minute, not one per COPY.
    -- One writer at a time; the others skip it.
    IF n > 0 AND random() * greatest(pg_stat_get_live_tuples(%3$L::regclass), 1000) < n
       AND pg_try_advisory_xact_lock(hashtext('postgrescopy_ai_compact/' || %4$L)) THEN
        PERFORM %1$I.postgrescopy_ai_compact(now() - (SELECT late_window FROM %1$I.ai_spend_settings));
    END IF;
    RETURN NULL;
END
$body$$f$, s,
        {{schema}}.postgrescopy_ai_partial_query(replace(calls, format('FROM %I.spans s', s),
            format('FROM (SELECT %s, coalesce(r.resource_attributes, k.resource_attributes) AS resource_attributes '
                   'FROM postgrescopy_new_spans r LEFT JOIN %I.contexts k ON k.context_id = r.context_id) s', cols, s)),
            ''), format('%I.ai_spend_partial', s), s);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.postgrescopy_ai_capture() FROM PUBLIC', s);
END
$make$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_capture_make() FROM PUBLIC;

-- postgrescopy_ai_partials: as in version 6, and when it recomputed the
-- partials (the calls text or partial_from changed, or p_force), the hours
-- from partial_from's on are remade from them.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_partials(p_force boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $partials$
DECLARE
    before record;
    after  record;
BEGIN
    SELECT st.partial_from, st.partial_sql INTO before FROM {{schema}}.ai_spend_settings st;
    PERFORM {{schema}}.postgrescopy_ai_partials_generate(p_force);
    PERFORM {{schema}}.postgrescopy_ai_capture_live_size();
    SELECT st.partial_from, st.partial_sql INTO after FROM {{schema}}.ai_spend_settings st;
    IF after.partial_from <> 'infinity' AND (p_force OR after IS DISTINCT FROM before) THEN
        PERFORM {{schema}}.postgrescopy_ai_hours(after.partial_from, 'infinity');
    END IF;
END
$partials$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_partials(boolean) FROM PUBLIC;

-- ai_spend_groups with p_hours: see the top. The first column is the start
-- of the UTC hour of the group's row, or of its minute; a group may come in
-- several rows (raw and partial parts): sum them.
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_groups(p_lo timestamptz, p_lo_incl boolean, p_hi timestamptz, p_hi_incl boolean,
                                                      p_team boolean, p_hours boolean)
RETURNS TABLE (period timestamptz, provider text, model text, dims jsonb, team text, span_kind text, has_input boolean,
               currency text, calls bigint, reported_calls bigint, catalog_calls bigint, unpriced_calls bigint,
               error_calls bigint, duration_ns bigint, input_tokens bigint, uncached_input_tokens bigint,
               cache_read_tokens bigint, cache_creation_tokens bigint, output_tokens bigint, reasoning_tokens bigint,
               reported_cost numeric, computed_cost numeric, cost numeric, no_tokens_calls bigint)
LANGUAGE plpgsql STABLE
AS $groups$
DECLARE
    s       constant text := {{schema_lit}};
    lo_op   constant text := CASE WHEN p_lo_incl THEN '>=' ELSE '>' END;
    hi_op   constant text := CASE WHEN p_hi_incl THEN '<=' ELSE '<' END;
    pred    constant text := format('c.start_time %s %L AND c.start_time %s %L', lo_op, p_lo, hi_op, p_hi);
    inside  constant text := format('p.min_start %s %L AND p.max_start %s %L', lo_op, p_lo, hi_op, p_hi);
    lo_m    constant timestamptz := date_trunc('minute', p_lo, 'UTC');
    hi_m    constant timestamptz := date_trunc('minute', p_hi, 'UTC');
    g       timestamptz;
    mixed   timestamptz[];
    hours   timestamptz[] := '{}';
    spans   tstzrange[] := '{}';
    h       timestamptz;
    cur     timestamptz;
    raw     text[] := '{}';
    team_expr constant text := CASE WHEN p_team THEN $t$coalesce(c.dims ->> 'team', c.span_attributes ->> 'team')$t$ ELSE 'NULL::text' END;
    q       text;
BEGIN
    g := greatest(lo_m, (SELECT st.partial_from FROM {{schema}}.ai_spend_settings st));
    IF g > hi_m THEN
        raw := raw || pred;
    ELSE
        IF g > p_lo THEN
            raw := raw || format('%s AND c.start_time < %L', pred, g);
        END IF;
        -- Minutes to read raw: a bound inside a group (some of its calls in
        -- the range, some not), or a price boundary inside one.
        EXECUTE format($m$
            SELECT coalesce(array_agg(DISTINCT m), '{}') FROM (
                SELECT p.minute AS m FROM %1$I.ai_spend_partial p
                WHERE p.minute IN (%2$L, %3$L) AND p.minute >= %4$L
                  AND NOT (%5$s) AND p.max_start %6$s %7$L AND p.min_start %8$s %9$L
                UNION ALL
                SELECT p.minute FROM %1$I.model_prices mp, LATERAL (VALUES (mp.valid_from), (mp.valid_to)) x(bound),
                     %1$I.ai_spend_partial p
                WHERE isfinite(x.bound) AND x.bound <> date_trunc('minute', x.bound, 'UTC')
                  AND p.minute = date_trunc('minute', x.bound, 'UTC') AND p.minute >= %4$L AND p.minute <= %3$L
                  AND p.min_start < x.bound AND p.max_start >= x.bound) x$m$,
            s, lo_m, hi_m, g, inside, lo_op, p_lo, hi_op, p_hi) INTO mixed;
        raw := raw || ARRAY(SELECT format('%s AND c.start_time >= %L AND c.start_time < %L', pred, x, x + interval '1 minute') FROM unnest(mixed) x);
        IF p_hours THEN
            -- Hours read whole: at or after g, every group inside the range,
            -- no price boundary and no local day boundary inside, no minute
            -- of them read raw.
            EXECUTE format($h$
                SELECT coalesce(array_agg(h), '{}') FROM (
                SELECT p.hour AS h FROM %1$I.ai_spend_partial_hour p
                WHERE p.hour >= %2$L AND p.hour <= %3$L
                  AND p.hour <> ALL (ARRAY(SELECT date_trunc('hour', x, 'UTC') FROM unnest(%4$L::timestamptz[]) x))
                  AND date_trunc('day', p.hour) = date_trunc('day', p.hour + interval '1 hour' - interval '1 microsecond')
                  AND NOT EXISTS (SELECT 1 FROM %1$I.model_prices mp
                                  WHERE mp.valid_from > p.hour AND mp.valid_from < p.hour + interval '1 hour'
                                     OR mp.valid_to > p.hour AND mp.valid_to < p.hour + interval '1 hour')
                GROUP BY p.hour
                HAVING bool_and(%5$s)) x$h$,
                s, g, hi_m, mixed, inside) INTO hours;
        END IF;
        -- The minutes read: from g to hi_m, less the hours read whole, as
        -- ranges (an index range scan each, no hour's minutes fetched).
        cur := g;
        FOR h IN SELECT x FROM unnest(hours) x ORDER BY x LOOP
            IF h > cur THEN
                spans := spans || tstzrange(cur, h);
            END IF;
            cur := h + interval '1 hour';
        END LOOP;
        IF cur <= hi_m THEN
            spans := spans || tstzrange(cur, hi_m + interval '1 minute');
        END IF;
    END IF;

    q := format($raw$
    SELECT date_trunc('minute', c.start_time, 'UTC'), c.provider, c.model, c.dims, %3$s, c.span_kind,
           c.input_tokens IS NOT NULL, c.currency,
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
           sum(c.reported_cost),
           sum(c.computed_cost) FILTER (WHERE c.cost_source = 'catalog'),
           sum(c.cost),
           count(*) FILTER (WHERE c.unpriced_reason = 'no_tokens')
    FROM (%2$s) c
    GROUP BY 1, 2, 3, 4, 5, 6, 7, 8$raw$, s,
        array_to_string(ARRAY(SELECT format('SELECT * FROM %I.gen_ai_calls c WHERE %s', s, r) FROM unnest(raw) r), ' UNION ALL '),
        team_expr);
    IF cardinality(raw) = 0 THEN
        q := '';
    ELSIF g <= hi_m THEN
        q := q || ' UNION ALL ';
    END IF;
    IF g <= hi_m THEN
        -- No price boundary inside a group read here: the catalog row
        -- valid at its earliest call is every call's.
        q := q || format($part$
    (WITH p AS MATERIALIZED (
        SELECT p.minute, min(p.min_start) AS min_start, p.provider, p.model, p.dims, %5$s AS team, p.span_kind,
               p.has_input, p.has_tokens, p.reported,
               sum(p.calls)::bigint AS calls, sum(p.error_calls)::bigint AS error_calls, sum(p.duration_ns)::bigint AS duration_ns,
               sum(p.input_tokens)::bigint AS input_tokens, sum(p.uncached_input_tokens)::bigint AS uncached_input_tokens,
               sum(p.cache_read_tokens)::bigint AS cache_read_tokens, sum(p.cache_creation_tokens)::bigint AS cache_creation_tokens,
               sum(p.output_tokens)::bigint AS output_tokens, sum(p.reasoning_tokens)::bigint AS reasoning_tokens,
               sum(p.priced_output_tokens) AS priced_output_tokens, sum(p.priced_reasoning_tokens) AS priced_reasoning_tokens,
               sum(p.reported_cost) AS reported_cost, row_number() OVER () AS gid
        FROM (
            SELECT p.minute, p.min_start, p.provider, p.model, p.dims, p.team, p.span_kind,
                   p.has_input, p.has_tokens, p.reported, p.calls, p.error_calls, p.duration_ns, p.input_tokens,
                   p.uncached_input_tokens, p.cache_read_tokens, p.cache_creation_tokens, p.output_tokens,
                   p.reasoning_tokens, p.priced_output_tokens, p.priced_reasoning_tokens, p.reported_cost
            FROM unnest(%2$L::tstzrange[]) r
            JOIN %1$I.ai_spend_partial p ON p.minute >= lower(r) AND p.minute < upper(r)
            WHERE p.minute <> ALL (%4$L::timestamptz[]) AND %6$s
            UNION ALL
            SELECT p.hour, p.min_start, p.provider, p.model, p.dims, p.team, p.span_kind,
                   p.has_input, p.has_tokens, p.reported, p.calls, p.error_calls, p.duration_ns, p.input_tokens,
                   p.uncached_input_tokens, p.cache_read_tokens, p.cache_creation_tokens, p.output_tokens,
                   p.reasoning_tokens, p.priced_output_tokens, p.priced_reasoning_tokens, p.reported_cost
            FROM %1$I.ai_spend_partial_hour p
            WHERE p.hour = ANY (%10$L::timestamptz[])
        ) p
        GROUP BY p.minute, p.provider, p.model, p.dims, 6, p.span_kind, p.has_input, p.has_tokens, p.reported
    ),
    c AS MATERIALIZED (
        SELECT k.provider AS k_provider, k.model AS k_model, mp.id, mp.currency, mp.valid_from, mp.valid_to,
               mp.input_per_mtok, mp.output_per_mtok, mp.cache_read_per_mtok, mp.cache_write_per_mtok, mp.reasoning_per_mtok,
               mp.match, mp.model, mp.provider
        FROM (SELECT d.provider, d.model, regexp_replace(d.model, %9$L, '') AS sm
              FROM (SELECT DISTINCT p.provider, p.model FROM p) d) k
        JOIN %1$I.model_prices mp
          ON (mp.provider IS NULL OR mp.provider = k.provider)
         AND %7$s
    ),
    priced AS (
        SELECT DISTINCT ON (p.gid) p.gid, c.*
        FROM p JOIN c ON c.k_model = p.model AND c.k_provider IS NOT DISTINCT FROM p.provider
         AND p.min_start >= c.valid_from AND p.min_start < c.valid_to
        ORDER BY p.gid, %8$s
    )
    SELECT p.minute, p.provider, p.model, p.dims, p.team, p.span_kind, p.has_input,
           CASE WHEN p.reported THEN 'USD' ELSE mp.currency END,
           p.calls,
           CASE WHEN p.reported THEN p.calls ELSE 0 END,
           CASE WHEN NOT p.reported AND mp.id IS NOT NULL AND p.has_tokens THEN p.calls ELSE 0 END,
           CASE WHEN NOT p.reported AND (mp.id IS NULL OR NOT p.has_tokens) THEN p.calls ELSE 0 END,
           p.error_calls, p.duration_ns, p.input_tokens, p.uncached_input_tokens, p.cache_read_tokens,
           p.cache_creation_tokens, p.output_tokens, p.reasoning_tokens,
           CASE WHEN p.reported THEN p.reported_cost END,
           x.computed_cost,
           CASE WHEN p.reported THEN p.reported_cost ELSE x.computed_cost END,
           CASE WHEN NOT p.reported AND NOT p.has_tokens THEN p.calls ELSE 0 END
    FROM p
    LEFT JOIN priced mp ON mp.gid = p.gid
    CROSS JOIN LATERAL (
        SELECT CASE WHEN NOT p.reported AND mp.id IS NOT NULL AND p.has_tokens THEN
                   (p.uncached_input_tokens * mp.input_per_mtok
                    + p.cache_read_tokens * coalesce(mp.cache_read_per_mtok, mp.input_per_mtok)
                    + p.cache_creation_tokens * coalesce(mp.cache_write_per_mtok, mp.input_per_mtok)
                    + p.priced_output_tokens * mp.output_per_mtok
                    + p.priced_reasoning_tokens * coalesce(mp.reasoning_per_mtok, mp.output_per_mtok)) / 1000000
               END AS computed_cost
    ) x)$part$, s, spans, hi_m, mixed, CASE WHEN p_team THEN 'p.team' ELSE 'NULL::text' END, inside,
        {{schema}}.postgrescopy_price_match('mp', 'k.model', 'k.sm'), {{schema}}.postgrescopy_price_rank('c', 'c.k_model'),
        {{schema}}.postgrescopy_model_prefix(), hours);
    END IF;
    RETURN QUERY EXECUTE q;
END
$groups$;

-- ai_spend_groups without p_hours: per minute, as in version 11.
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_groups(p_lo timestamptz, p_lo_incl boolean, p_hi timestamptz, p_hi_incl boolean, p_team boolean)
RETURNS TABLE (minute timestamptz, provider text, model text, dims jsonb, team text, span_kind text, has_input boolean,
               currency text, calls bigint, reported_calls bigint, catalog_calls bigint, unpriced_calls bigint,
               error_calls bigint, duration_ns bigint, input_tokens bigint, uncached_input_tokens bigint,
               cache_read_tokens bigint, cache_creation_tokens bigint, output_tokens bigint, reasoning_tokens bigint,
               reported_cost numeric, computed_cost numeric, cost numeric, no_tokens_calls bigint)
LANGUAGE sql STABLE
AS $groups$
    SELECT * FROM {{schema}}.ai_spend_groups(p_lo, p_lo_incl, p_hi, p_hi_incl, p_team, false)
$groups$;

-- ai_spend_aggregate (the rollup's and ai_spend's) reads whole hours whole.
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_aggregate(p_from timestamptz, p_to timestamptz)
RETURNS SETOF {{schema}}.ai_spend_hourly
LANGUAGE sql STABLE
AS $agg$
    SELECT date_trunc('hour', g.period, 'UTC'), g.provider, g.model, g.dims, g.currency,
           sum(g.calls)::bigint, sum(g.reported_calls)::bigint, sum(g.catalog_calls)::bigint,
           sum(g.unpriced_calls)::bigint, sum(g.error_calls)::bigint, sum(g.duration_ns)::bigint,
           sum(g.input_tokens)::bigint, sum(g.uncached_input_tokens)::bigint, sum(g.cache_read_tokens)::bigint,
           sum(g.cache_creation_tokens)::bigint, sum(g.output_tokens)::bigint, sum(g.reasoning_tokens)::bigint,
           coalesce(sum(g.reported_cost), 0), coalesce(sum(g.computed_cost), 0), coalesce(sum(g.cost), 0),
           sum(g.no_tokens_calls)::bigint
    FROM {{schema}}.ai_spend_groups(p_from, true, p_to, false, false, true) g
    GROUP BY 1, 2, 3, 4, 5
$agg$;

-- postgrescopy_ai_partials_expire deletes the partials of the minutes
-- before p_before, and their hours: those before p_before's go, p_before's
-- is remade from the minutes left.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_partials_expire(p_before timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $expire$
DECLARE
    n bigint;
BEGIN
    DELETE FROM {{schema}}.ai_spend_partial WHERE minute < p_before;
    GET DIAGNOSTICS n = ROW_COUNT;
    IF n > 0 THEN
        DELETE FROM {{schema}}.ai_spend_partial_hour WHERE hour < date_trunc('hour', p_before, 'UTC');
        PERFORM {{schema}}.postgrescopy_ai_hours(p_before, date_trunc('hour', p_before, 'UTC') + interval '1 hour');
    END IF;
END
$expire$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_partials_expire(timestamptz) FROM PUBLIC;

-- postgrescopy_maintain: as in version 10, the partials past the retention
-- deleted with their hours (postgrescopy_ai_partials_expire).
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_maintain(p_interval interval, p_premake integer, p_retention interval)
RETURNS TABLE (action text, partition_name text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $maintain$
DECLARE
    s     constant text := {{schema_lit}};
    st    record;
    lo    timestamptz;
    hi    timestamptz := date_trunc('hour', now(), 'UTC');
    kept  timestamptz := '-infinity';
    n     bigint;
BEGIN
    IF NOT pg_try_advisory_xact_lock(hashtext('postgrescopy_maintain/' || s)) THEN
        RETURN;
    END IF;
    SELECT * INTO st FROM {{schema}}.ai_spend_settings FOR UPDATE;
    PERFORM {{schema}}.postgrescopy_ai_configure(st.dimensions, NULL);
    IF st.rolled_to IS NULL THEN
        SELECT min(start_time) INTO lo FROM {{schema}}.spans;
    ELSE
        lo := least(st.rolled_to, hi) - st.late_window;
    END IF;
    IF p_retention IS NOT NULL THEN
        kept := date_trunc('hour', now() - p_retention, 'UTC') + interval '1 hour';
        lo := greatest(lo, kept);
        PERFORM {{schema}}.postgrescopy_ai_partials_expire(now() - p_retention - p_interval);
    END IF;
    lo := coalesce(lo, hi);
    IF pg_try_advisory_xact_lock(hashtext('postgrescopy_ai_compact/' || s)) THEN
        PERFORM {{schema}}.postgrescopy_ai_compact(lo);
    END IF;
    n := {{schema}}.postgrescopy_ai_rollup(lo, hi);
    UPDATE {{schema}}.ai_spend_settings SET rolled_to = hi, live_from = greatest(hi - st.late_window, kept);
    IF n > 0 THEN
        action := 'rolled_up'; partition_name := 'ai_spend_hourly';
        detail := n || ' rows from ' || to_char(date_trunc('hour', lo, 'UTC') AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI"Z"');
        RETURN NEXT;
    END IF;
    RETURN QUERY SELECT * FROM {{schema}}.postgrescopy_maintain_partitions(p_interval, p_premake, p_retention);
END
$maintain$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_maintain(interval, integer, interval) FROM PUBLIC;

-- The capture remade (when partials are on) and the hours filled from the
-- minutes, with ingest into spans waiting (as a recomputation does), so
-- that no COPY adds minutes the hours miss.
DO $fill$
BEGIN
    IF EXISTS (SELECT 1 FROM {{schema}}.ai_spend_settings st WHERE st.partial_from <> 'infinity' AND st.partial_sql IS NOT NULL)
       AND to_regprocedure(format('%I.postgrescopy_ai_capture()', {{schema_lit}})) IS NOT NULL THEN
        EXECUTE format('LOCK TABLE %I.spans_rows IN SHARE ROW EXCLUSIVE MODE', {{schema_lit}});
        PERFORM {{schema}}.postgrescopy_ai_capture_make();
        PERFORM {{schema}}.postgrescopy_ai_hours('-infinity', 'infinity');
    END IF;
END
$fill$;
