-- postgrescopy schema version 11: ai_spend_groups prices its groups in one
-- join.
--
-- Version 10 looked up each group's catalog row in a lateral subquery:
-- one scan and sort of the matching catalog rows per group, the largest
-- part of the AI spend queries once the partials hold thousands of groups
-- (the token cost over 24 hours at 2M rows: 230 ms, of which the lookups
-- took about half). The groups are now numbered and joined to the matching
-- catalog rows at once, hashed on the model, and DISTINCT ON keeps each
-- group's first row in the same ranking (postgrescopy_price_rank); a group
-- without one is left joined, unpriced, as before. The model prefix is
-- taken off each distinct model, not off each group's. A group with no
-- model matches no catalog row in either form (postgrescopy_price_match of
-- NULL is NULL). Same answers; nothing is recomputed.

CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_groups(p_lo timestamptz, p_lo_incl boolean, p_hi timestamptz, p_hi_incl boolean, p_team boolean)
RETURNS TABLE (minute timestamptz, provider text, model text, dims jsonb, team text, span_kind text, has_input boolean,
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
        FROM %1$I.ai_spend_partial p
        WHERE p.minute >= %2$L AND p.minute <= %3$L AND p.minute <> ALL (%4$L::timestamptz[]) AND %6$s
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
    ) x)$part$, s, g, hi_m, mixed, CASE WHEN p_team THEN 'p.team' ELSE 'NULL::text' END, inside,
        {{schema}}.postgrescopy_price_match('mp', 'k.model', 'k.sm'), {{schema}}.postgrescopy_price_rank('c', 'c.k_model'),
        {{schema}}.postgrescopy_model_prefix());
    END IF;
    RETURN QUERY EXECUTE q;
END
$groups$;
