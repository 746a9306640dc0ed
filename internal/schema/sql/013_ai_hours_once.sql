-- postgrescopy schema version 13: ai_spend_groups checks each hour once.
--
-- ai_spend_groups(..., p_hours true) picks the hours it reads whole from
-- ai_spend_partial_hour. Version 12 checked the catalog (no price boundary
-- inside the hour) and the local day once per hour row, and the table holds
-- a row per group and COPY until the capture's merge: tens of thousands of
-- rows an hour under sustained ingest, each probing the catalog. The hour
-- rows are now grouped per hour first and each hour is checked once. Same
-- answers; the function is replaced in place, nothing is recomputed.

-- ai_spend_groups with p_hours: as in version 12. The first column is the start
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
            -- The hour rows are grouped first: the catalog and the day are
            -- checked once an hour, not once a row.
            EXECUTE format($h$
                SELECT coalesce(array_agg(x.h), '{}') FROM (
                SELECT p.hour AS h FROM %1$I.ai_spend_partial_hour p
                WHERE p.hour >= %2$L AND p.hour <= %3$L
                  AND p.hour <> ALL (ARRAY(SELECT date_trunc('hour', x, 'UTC') FROM unnest(%4$L::timestamptz[]) x))
                GROUP BY p.hour
                HAVING bool_and(%5$s)) x
                WHERE date_trunc('day', x.h) = date_trunc('day', x.h + interval '1 hour' - interval '1 microsecond')
                  AND NOT EXISTS (SELECT 1 FROM %1$I.model_prices mp
                                  WHERE mp.valid_from > x.h AND mp.valid_from < x.h + interval '1 hour'
                                     OR mp.valid_to > x.h AND mp.valid_to < x.h + interval '1 hour')$h$,
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
