-- postgrescopy schema version 5: AI spend aggregated as it is written.
--
-- Under continuous ingest the open hour holds every recent call, and the
-- hourly rollup cannot help it: ai_spend and the token cost query read the
-- raw calls, a catalog look-up and (for team) a detoast of each call's
-- whole span_attributes. Now a statement trigger on spans_rows aggregates
-- each COPY's calls (its transition table: the rows actually stored, in the
-- writer's transaction, so refused rows, rolled-back savepoints and batches
-- the ledger already holds add nothing) into ai_spend_partial: one row per
-- minute, provider, model, dimensions, team, span kind and the flags that
-- decide a call's cost source, with the earliest and latest start time of
-- its calls. Every entry format a collector writes goes through it: the
-- aggregation is the database's, not the encoder's.
--
-- Cost is priced at read time per group, with the catalog row valid at the
-- group's earliest call: the same row for all its calls unless a price
-- boundary falls between its earliest and latest call. Such a minute, and a
-- minute where a query's bound splits a group, is read from the raw calls
-- (ai_spend_groups); a boundary on a whole minute never splits a group.
--
-- ai_spend_settings.partial_from: calls from that minute on are in the
-- partials, calls before are read raw. It moves to the present when the
-- call view changes (dimensions reconfigured, promoted columns added): the
-- partials from then on are recomputed, those before are not read. Citus
-- (distribute.sql) sets it to infinity: every read stays raw there.

CREATE TABLE IF NOT EXISTS {{schema}}.ai_spend_partial (
    minute                timestamptz NOT NULL, -- UTC
    min_start             timestamptz NOT NULL, -- the group's earliest call
    max_start             timestamptz NOT NULL, -- and latest
    provider              text,
    model                 text,
    dims                  jsonb       NOT NULL,
    team                  text,
    span_kind             text,
    has_input             boolean     NOT NULL, -- input_tokens IS NOT NULL
    has_tokens            boolean     NOT NULL, -- input or output tokens: a catalog price applies
    reported              boolean     NOT NULL, -- reported_cost IS NOT NULL
    calls                 bigint      NOT NULL,
    error_calls           bigint      NOT NULL,
    duration_ns           bigint      NOT NULL,
    input_tokens          bigint      NOT NULL,
    uncached_input_tokens bigint      NOT NULL,
    cache_read_tokens     bigint      NOT NULL,
    cache_creation_tokens bigint      NOT NULL,
    output_tokens         bigint      NOT NULL,
    reasoning_tokens      bigint      NOT NULL,
    priced_output_tokens  bigint      NOT NULL, -- output less reasoning, per call at least 0
    priced_reasoning_tokens bigint    NOT NULL, -- reasoning, per call at most the output
    reported_cost         numeric     NOT NULL
);
CREATE INDEX IF NOT EXISTS ai_spend_partial_minute_idx ON {{schema}}.ai_spend_partial (minute);

ALTER TABLE {{schema}}.ai_spend_settings ADD COLUMN IF NOT EXISTS partial_from timestamptz NOT NULL DEFAULT 'infinity';
ALTER TABLE {{schema}}.ai_spend_settings ADD COLUMN IF NOT EXISTS partial_sql text;

-- The view rebuild of versions 2-4, kept under another name: the new
-- postgrescopy_ai_configure calls it, then derives the partials' capture
-- from the same call view.
ALTER FUNCTION {{schema}}.postgrescopy_ai_configure(jsonb, interval) RENAME TO postgrescopy_ai_configure_views;

-- postgrescopy_ai_compact merges the partials of the minutes from p_from
-- on into one row per group and minute.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_compact(p_from timestamptz)
RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $compact$
    WITH d AS (DELETE FROM {{schema}}.ai_spend_partial WHERE minute >= p_from RETURNING *)
    INSERT INTO {{schema}}.ai_spend_partial
    SELECT minute, min(min_start), max(max_start), provider, model, dims, team, span_kind, has_input, has_tokens, reported,
           sum(calls), sum(error_calls), sum(duration_ns), sum(input_tokens), sum(uncached_input_tokens),
           sum(cache_read_tokens), sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens),
           sum(priced_output_tokens), sum(priced_reasoning_tokens), sum(reported_cost)
    FROM d GROUP BY minute, provider, model, dims, team, span_kind, has_input, has_tokens, reported
$compact$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_compact(timestamptz) FROM PUBLIC;

-- postgrescopy_ai_partials (re)builds the capture trigger's function and the
-- backfill from the gen_ai_spans text the view rebuild stored, when it
-- changed or p_force: then partials from this minute on are recomputed from
-- the raw calls and partial_from moves here. Ingest into spans waits for it
-- (SHARE ROW EXCLUSIVE), so that no transaction still running the previous
-- capture commits partials after the recomputation.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_partials(p_force boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $partials$
DECLARE
    s     constant text := {{schema_lit}};
    st    record;
    v     text;
    calls text;
    cols  text;
    agg   text;
    i     integer;
    j     integer;
    cut   timestamptz;
BEGIN
    SELECT * INTO st FROM {{schema}}.ai_spend_settings;
    IF st.partial_from = 'infinity' AND NOT p_force THEN
        RETURN; -- partials are off (Citus)
    END IF;
    v := st.view_sql;
    i := position('gen_ai_spans AS' IN v);
    j := position(';' || chr(10) || 'CREATE OR REPLACE VIEW' IN v);
    IF i = 0 OR j <= i THEN
        RAISE EXCEPTION 'postgrescopy_ai_partials: no gen_ai_spans in the stored view text';
    END IF;
    calls := substr(v, i + length('gen_ai_spans AS'), j - i - length('gen_ai_spans AS'));
    IF calls IS NOT DISTINCT FROM st.partial_sql AND NOT p_force THEN
        RETURN;
    END IF;

    -- The same call expressions over the COPY's stored rows, their context
    -- joined as the spans view joins it.
    SELECT string_agg(format('r.%I', a.attname), ', ' ORDER BY a.attnum) INTO cols
    FROM pg_attribute a
    WHERE a.attrelid = format('%I.spans_rows', s)::regclass AND a.attnum > 0 AND NOT a.attisdropped
      AND a.attname NOT IN ('resource_attributes', 'context_id');
    agg := $agg$
SELECT date_trunc('minute', c.start_time, 'UTC'), min(c.start_time), max(c.start_time), c.provider, c.model, c.dims,
       coalesce(c.dims ->> 'team', c.span_attributes ->> 'team'), c.span_kind,
       c.input_tokens IS NOT NULL, c.input_tokens IS NOT NULL OR c.output_tokens IS NOT NULL,
       c.reported_cost IS NOT NULL,
       count(*), count(*) FILTER (WHERE c.status_code = 'Error'),
       coalesce(sum(c.duration_ns), 0), coalesce(sum(c.input_tokens), 0), coalesce(sum(c.uncached_input_tokens), 0),
       coalesce(sum(c.cache_read_tokens), 0), coalesce(sum(c.cache_creation_tokens), 0),
       coalesce(sum(c.output_tokens), 0), coalesce(sum(c.reasoning_tokens), 0),
       coalesce(sum(greatest(coalesce(c.output_tokens, 0) - coalesce(c.reasoning_tokens, 0), 0)), 0),
       coalesce(sum(least(coalesce(c.reasoning_tokens, 0), coalesce(c.output_tokens, c.reasoning_tokens, 0))), 0),
       coalesce(sum(c.reported_cost), 0)
FROM (%s) c %s
GROUP BY 1, 4, 5, 6, 7, 8, 9, 10, 11$agg$;
    EXECUTE format($f$
CREATE OR REPLACE FUNCTION %1$I.postgrescopy_ai_capture() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $body$
DECLARE
    n bigint;
BEGIN
    INSERT INTO %1$I.ai_spend_partial %2$s;
    GET DIAGNOSTICS n = ROW_COUNT;
    -- Each COPY adds a row per group and minute its calls fall in. A COPY
    -- merges the late window's rows into one per group and minute with the
    -- chance of its rows over the table's (at least 1,000): about once the
    -- table has doubled, so that each row is rewritten a few times at most
    -- and readers sum about a row per group and minute, not one per COPY.
    -- One writer at a time; the others skip it.
    IF n > 0 AND random() * greatest((SELECT c.reltuples FROM pg_class c WHERE c.oid = %3$L::regclass), 1000) < n
       AND pg_try_advisory_xact_lock(hashtext('postgrescopy_ai_compact/' || %4$L)) THEN
        PERFORM %1$I.postgrescopy_ai_compact(now() - (SELECT late_window FROM %1$I.ai_spend_settings));
    END IF;
    RETURN NULL;
END
$body$$f$, s,
        format(agg, replace(calls, format('FROM %I.spans s', s),
                            format('FROM (SELECT %s, coalesce(r.resource_attributes, k.resource_attributes) AS resource_attributes '
                                   'FROM postgrescopy_new_spans r LEFT JOIN %I.contexts k ON k.context_id = r.context_id) s', cols, s)),
               ''), format('%I.ai_spend_partial', s), s);
    EXECUTE format('REVOKE ALL ON FUNCTION %I.postgrescopy_ai_capture() FROM PUBLIC', s);
    IF NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = format('%I.spans_rows', s)::regclass
                   AND tgname = 'postgrescopy_ai_capture') THEN
        EXECUTE format('CREATE TRIGGER postgrescopy_ai_capture AFTER INSERT ON %1$I.spans_rows '
                       'REFERENCING NEW TABLE AS postgrescopy_new_spans FOR EACH STATEMENT '
                       'EXECUTE FUNCTION %1$I.postgrescopy_ai_capture()', s);
    END IF;

    EXECUTE format('LOCK TABLE %I.spans_rows IN SHARE ROW EXCLUSIVE MODE', s);
    cut := date_trunc('minute', clock_timestamp(), 'UTC');
    -- No span stored yet: the partials will hold every call.
    EXECUTE format('SELECT CASE WHEN EXISTS (SELECT 1 FROM %I.spans_rows) THEN %L::timestamptz ELSE ''-infinity'' END', s, cut) INTO cut;
    DELETE FROM {{schema}}.ai_spend_partial WHERE minute >= cut;
    EXECUTE format('INSERT INTO %I.ai_spend_partial ', s) || format(agg, calls, format('WHERE c.start_time >= %L', cut));
    UPDATE {{schema}}.ai_spend_settings SET partial_from = cut, partial_sql = calls;
END
$partials$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_partials(boolean) FROM PUBLIC;

-- postgrescopy_ai_configure: as before, and the partials follow the view.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_configure(p_dimensions jsonb, p_late_window interval)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $configure$
BEGIN
    PERFORM {{schema}}.postgrescopy_ai_configure_views(p_dimensions, p_late_window);
    PERFORM {{schema}}.postgrescopy_ai_partials(false);
END
$configure$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_configure(jsonb, interval) FROM PUBLIC;

-- Partials start now: rows already stored are read raw before this minute
-- (and from it on, the few stamped later, recomputed here). Not where Citus
-- distributes spans_rows already (a schema distributed at an earlier
-- version): a COPY into a distributed table fills no transition table on
-- the coordinator, Citus refuses the trigger there, and partial_from stays
-- infinity, every read raw, as citus/distribute.sql leaves it.
DO $start$
DECLARE
    distributed boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::regclass)'
            INTO distributed USING format('%I.spans_rows', {{schema_lit}});
    END IF;
    IF NOT distributed THEN
        PERFORM {{schema}}.postgrescopy_ai_partials(true);
    END IF;
END
$start$;

-- ai_spend_groups: the calls with start_time in (p_lo, p_hi) (each bound
-- included when its _incl says so), per UTC minute, provider, model,
-- dimensions, team (with p_team; NULL otherwise: reading it raw detoasts
-- span_attributes), span kind and whether input tokens are set, priced:
-- reported_cost, computed_cost (catalog-priced calls) and cost are NULL
-- when no call of the group has one, as sum() over the calls gives. Read
-- from the partials from partial_from on, except the minutes where a bound
-- or a price boundary falls inside a group (between its earliest and latest
-- call): those, and the calls before partial_from, are read raw.
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_groups(p_lo timestamptz, p_lo_incl boolean, p_hi timestamptz, p_hi_incl boolean, p_team boolean)
RETURNS TABLE (minute timestamptz, provider text, model text, dims jsonb, team text, span_kind text, has_input boolean,
               currency text, calls bigint, reported_calls bigint, catalog_calls bigint, unpriced_calls bigint,
               error_calls bigint, duration_ns bigint, input_tokens bigint, uncached_input_tokens bigint,
               cache_read_tokens bigint, cache_creation_tokens bigint, output_tokens bigint, reasoning_tokens bigint,
               reported_cost numeric, computed_cost numeric, cost numeric)
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
           sum(c.cost)
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
           CASE WHEN p.reported THEN p.reported_cost ELSE x.computed_cost END
    FROM (
        SELECT p.minute, min(p.min_start) AS min_start, p.provider, p.model, p.dims, %5$s AS team, p.span_kind,
               p.has_input, p.has_tokens, p.reported,
               sum(p.calls)::bigint AS calls, sum(p.error_calls)::bigint AS error_calls, sum(p.duration_ns)::bigint AS duration_ns,
               sum(p.input_tokens)::bigint AS input_tokens, sum(p.uncached_input_tokens)::bigint AS uncached_input_tokens,
               sum(p.cache_read_tokens)::bigint AS cache_read_tokens, sum(p.cache_creation_tokens)::bigint AS cache_creation_tokens,
               sum(p.output_tokens)::bigint AS output_tokens, sum(p.reasoning_tokens)::bigint AS reasoning_tokens,
               sum(p.priced_output_tokens) AS priced_output_tokens, sum(p.priced_reasoning_tokens) AS priced_reasoning_tokens,
               sum(p.reported_cost) AS reported_cost
        FROM %1$I.ai_spend_partial p
        WHERE p.minute >= %2$L AND p.minute <= %3$L AND p.minute <> ALL (%4$L::timestamptz[]) AND %6$s
        GROUP BY p.minute, p.provider, p.model, p.dims, 6, p.span_kind, p.has_input, p.has_tokens, p.reported
    ) p
    LEFT JOIN LATERAL (
        SELECT mp.* FROM %1$I.model_prices mp
        WHERE (mp.provider IS NULL OR mp.provider = p.provider)
          AND CASE mp.match WHEN 'exact' THEN mp.model = p.model ELSE p.model LIKE mp.model END
          AND p.min_start >= mp.valid_from AND p.min_start < mp.valid_to
        ORDER BY mp.match = 'exact' DESC, mp.provider IS NOT NULL DESC, length(mp.model) DESC, mp.valid_from DESC, mp.id DESC
        LIMIT 1
    ) mp ON true
    CROSS JOIN LATERAL (
        SELECT CASE WHEN NOT p.reported AND mp.id IS NOT NULL AND p.has_tokens THEN
                   (p.uncached_input_tokens * mp.input_per_mtok
                    + p.cache_read_tokens * coalesce(mp.cache_read_per_mtok, mp.input_per_mtok)
                    + p.cache_creation_tokens * coalesce(mp.cache_write_per_mtok, mp.input_per_mtok)
                    + p.priced_output_tokens * mp.output_per_mtok
                    + p.priced_reasoning_tokens * coalesce(mp.reasoning_per_mtok, mp.output_per_mtok)) / 1000000
               END AS computed_cost
    ) x$part$, s, g, hi_m, mixed, CASE WHEN p_team THEN 'p.team' ELSE 'NULL::text' END, inside);
    END IF;
    RETURN QUERY EXECUTE q;
END
$groups$;

-- ai_spend_aggregate (the rollup's and the ai_spend view's) reads the groups.
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_aggregate(p_from timestamptz, p_to timestamptz)
RETURNS SETOF {{schema}}.ai_spend_hourly
LANGUAGE sql STABLE
AS $agg$
    SELECT date_trunc('hour', g.minute, 'UTC'), g.provider, g.model, g.dims, g.currency,
           sum(g.calls)::bigint, sum(g.reported_calls)::bigint, sum(g.catalog_calls)::bigint,
           sum(g.unpriced_calls)::bigint, sum(g.error_calls)::bigint, sum(g.duration_ns)::bigint,
           sum(g.input_tokens)::bigint, sum(g.uncached_input_tokens)::bigint, sum(g.cache_read_tokens)::bigint,
           sum(g.cache_creation_tokens)::bigint, sum(g.output_tokens)::bigint, sum(g.reasoning_tokens)::bigint,
           coalesce(sum(g.reported_cost), 0), coalesce(sum(g.computed_cost), 0), coalesce(sum(g.cost), 0)
    FROM {{schema}}.ai_spend_groups(p_from, true, p_to, false, false) g
    GROUP BY 1, 2, 3, 4, 5
$agg$;

-- postgrescopy_maintain: as in version 2, and it merges the partials of the
-- hours it rolls up and after (one row per group and minute instead of one
-- per COPY)
-- and drops those older than the retention.
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
    PERFORM {{schema}}.postgrescopy_ai_configure(st.dimensions, NULL);
    IF st.rolled_to IS NULL THEN
        SELECT min(start_time) INTO lo FROM {{schema}}.spans;
    ELSE
        lo := least(st.rolled_to, hi) - st.late_window;
    END IF;
    IF p_retention IS NOT NULL THEN
        lo := greatest(lo, date_trunc('hour', now() - p_retention, 'UTC') + interval '1 hour');
        DELETE FROM {{schema}}.ai_spend_partial WHERE minute < now() - p_retention - p_interval;
    END IF;
    lo := coalesce(lo, hi);
    IF pg_try_advisory_xact_lock(hashtext('postgrescopy_ai_compact/' || s)) THEN
        PERFORM {{schema}}.postgrescopy_ai_compact(lo);
    END IF;
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
