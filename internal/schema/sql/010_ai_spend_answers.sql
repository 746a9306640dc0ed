-- postgrescopy schema version 10: AI spend as real instrumentations send it.
--
-- Four changes, none of which recomputes the partials (versions 5-9) or
-- moves partial_from:
--
-- * Model families. A price file entry without a * is now match 'family':
--   it prices its model and the versions providers name after it: a date
--   or number (gpt-4o-mini-2024-07-18, mistral-large-2411,
--   gemini-2.0-flash-001), -latest, -preview, -exp, -v2, Vertex's @20240620,
--   Bedrock's -v1:0 and vendor prefix (anthropic., us.anthropic.,
--   amazon.), and a path before the name (models/, openrouter/openai/).
--   Another model whose name begins the same (gpt-4o-mini for gpt-4o) is
--   not a version. The entry whose model is the call's name wins, then the
--   longest entry that matches (family or pattern), then one named for the
--   provider, then the latest valid_from.
-- * OpenInference. Its span kind is promoted into gen_ai_operation_name
--   (exporter side): gen_ai_spans reads LLM as chat, EMBEDDING as
--   embeddings, and its other kinds (CHAIN, TOOL, AGENT, RETRIEVER...) as no
--   operation, so that they are not calls for their kind alone. Its
--   embeddings' embedding.model_name is promoted into the response model:
--   they are calls (without tokens). Rows stored before hold no OpenInference
--   kind in that column, so the calls before this version are the same
--   calls: the stored partials stay right.
-- * Why unpriced. gen_ai_calls.unpriced_reason is no_tokens (no token count
--   on the call: a price cannot help) or no_price (tokens, but no catalog
--   row matches its provider, model and time); NULL for a priced call.
--   ai_spend_groups, ai_spend_hourly and ai_spend count no_tokens_calls
--   apart (the rest of unpriced_calls have no price). Hours rolled up
--   before this version have it NULL: unknown, until the late window
--   recomputes them.
-- * Late spans at once. ai_spend read the rollup for every hour before
--   rolled_to: a span arriving late for such an hour was missing there,
--   while gen_ai_calls showed it, until the next maintenance run. It now
--   reads the rollup only before live_from, the first hour the next run
--   recomputes (rolled_to less the late window, not before the retention),
--   and the calls from live_from on: a late span inside the late window is
--   counted at once. A span older than the late window is in gen_ai_calls
--   and in neither the rollup nor ai_spend until postgrescopy_ai_rollup is
--   run for its hours (as before).

DO $match$
DECLARE
    c text;
BEGIN
    SELECT conname INTO c FROM pg_constraint
    WHERE conrelid = '{{schema}}.model_prices'::regclass AND contype = 'c'
      AND pg_get_constraintdef(oid) LIKE '%match%exact%pattern%';
    IF c IS NOT NULL THEN
        EXECUTE format('ALTER TABLE {{schema}}.model_prices DROP CONSTRAINT %I', c);
    END IF;
END
$match$;
ALTER TABLE {{schema}}.model_prices ADD CONSTRAINT model_prices_match_check CHECK (match IN ('exact', 'family', 'pattern'));

ALTER TABLE {{schema}}.ai_spend_hourly ADD COLUMN IF NOT EXISTS no_tokens_calls bigint;
ALTER TABLE {{schema}}.ai_spend_settings ADD COLUMN IF NOT EXISTS live_from timestamptz;

-- postgrescopy_price_match is the SQL text of "catalog row p prices model
-- m" (p a model_prices alias, m a text expression, sm the same model
-- without what postgrescopy_model_prefix matches, computed once per model),
-- for the generated queries; postgrescopy_price_rank their ORDER BY among
-- the matching rows. The prefix compare comes first: the version regex
-- runs only on a row whose model begins the name.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_model_prefix()
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $prefix$
    -- a path, or Bedrock's region and vendor, before the name
    SELECT '^(.*/)?(((us|eu|apac|jp|au|ca|global|us-gov)\.)?(anthropic|amazon|meta|mistral|cohere|ai21|deepseek|openai|qwen|writer)\.)?'::text
$prefix$;

CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_price_match(p text, m text, sm text)
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $match$
    SELECT format($f$CASE %1$s.match WHEN 'exact' THEN %1$s.model = %2$s
        WHEN 'pattern' THEN %2$s LIKE %1$s.model
        ELSE (starts_with(%2$s, %1$s.model) AND substr(%2$s, length(%1$s.model) + 1) ~ %4$L)
          OR (starts_with(%3$s, %1$s.model) AND %3$s <> %2$s AND substr(%3$s, length(%1$s.model) + 1) ~ %4$L) END$f$,
        p, m, sm,
        -- versions after the family's name
        '^(-[0-9]{2,8}|-v[0-9]+(\.[0-9]+)*(:[0-9]+)?|:[0-9]+|@[0-9]{2,8}|[-@]latest|-preview|-exp)*$')
$match$;

CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_price_rank(p text, m text)
RETURNS text
LANGUAGE sql IMMUTABLE SET search_path = pg_catalog, pg_temp
AS $rank$
    SELECT format($f$(%1$s.match <> 'pattern' AND %1$s.model = %2$s) DESC, length(%1$s.model) DESC,
        %1$s.provider IS NOT NULL DESC, %1$s.valid_from DESC, %1$s.id DESC$f$, p, m)
$rank$;

-- postgrescopy_ai_configure_views: version 2's view rebuild, with the
-- OpenInference operations, the family match and unpriced_reason.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_configure_views(p_dimensions jsonb, p_late_window interval)
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
    PERFORM pg_advisory_xact_lock(hashtext('postgrescopy_ai_configure/' || s));
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
    -- The operation: the conventions' name, or OpenInference's span kind
    -- read as one (LLM, EMBEDDING) or as none (its other kinds).
    c[2] := format($op$CASE WHEN %1$s IN ('CHAIN', 'TOOL', 'AGENT', 'RETRIEVER', 'RERANKER', 'GUARDRAIL', 'EVALUATOR', 'PROMPT', 'UNKNOWN') THEN NULL
            WHEN %1$s = 'LLM' THEN 'chat' WHEN %1$s = 'EMBEDDING' THEN 'embeddings' ELSE %1$s END$op$, c[2]);

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

    -- gen_ai_spans and gen_ai_calls as in version 2; gen_ai_calls adds
    -- unpriced_reason.
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
       coalesce(c.reported_cost, c.computed_cost) AS cost,
       CASE WHEN c.reported_cost IS NOT NULL OR c.computed_cost IS NOT NULL THEN NULL
            WHEN c.input_tokens IS NULL AND c.output_tokens IS NULL THEN 'no_tokens'
            ELSE 'no_price' END AS unpriced_reason
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
        SELECT mp.* FROM (SELECT regexp_replace(t.model, %5$L, '') AS sm OFFSET 0) k, %1$I.model_prices mp
        WHERE (mp.provider IS NULL OR mp.provider = t.provider)
          AND %3$s
          AND t.start_time >= mp.valid_from AND t.start_time < mp.valid_to
        ORDER BY %4$s
        LIMIT 1
    ) p ON true
) c
$view$, s, expr, {{schema}}.postgrescopy_price_match('mp', 't.model', 'k.sm'), {{schema}}.postgrescopy_price_rank('mp', 't.model'),
        {{schema}}.postgrescopy_model_prefix()),
        '{{c12}}', c[12]), '{{c11}}', c[11]), '{{c10}}', c[10]), '{{c9}}', c[9]), '{{c8}}', c[8]), '{{c7}}', c[7]), '{{c6}}', c[6]), '{{c5}}', c[5]), '{{c4}}', c[4]), '{{c3}}', c[3]), '{{c2}}', c[2]), '{{c1}}', c[1]);
    IF v IS DISTINCT FROM (SELECT view_sql FROM {{schema}}.ai_spend_settings)
       OR to_regclass(format('%I.gen_ai_calls', s)) IS NULL THEN
        EXECUTE v;
    END IF;

    UPDATE {{schema}}.ai_spend_settings
    SET dimensions = p_dimensions, late_window = coalesce(p_late_window, late_window), view_sql = v;
END
$configure$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_configure_views(jsonb, interval) FROM PUBLIC;

-- ai_spend_groups: as in version 7, with the family match and
-- no_tokens_calls (the unpriced calls without tokens) last. Its result
-- type changes: dropped and made again (nothing depends on it but queries).
DROP FUNCTION IF EXISTS {{schema}}.ai_spend_groups(timestamptz, boolean, timestamptz, boolean, boolean);
CREATE FUNCTION {{schema}}.ai_spend_groups(p_lo timestamptz, p_lo_incl boolean, p_hi timestamptz, p_hi_incl boolean, p_team boolean)
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
               sum(p.reported_cost) AS reported_cost
        FROM %1$I.ai_spend_partial p
        WHERE p.minute >= %2$L AND p.minute <= %3$L AND p.minute <> ALL (%4$L::timestamptz[]) AND %6$s
        GROUP BY p.minute, p.provider, p.model, p.dims, 6, p.span_kind, p.has_input, p.has_tokens, p.reported
    ),
    c AS MATERIALIZED (
        SELECT k.provider AS k_provider, k.model AS k_model, mp.id, mp.currency, mp.valid_from, mp.valid_to,
               mp.input_per_mtok, mp.output_per_mtok, mp.cache_read_per_mtok, mp.cache_write_per_mtok, mp.reasoning_per_mtok,
               mp.match, mp.model, mp.provider
        FROM (SELECT DISTINCT p.provider, p.model, regexp_replace(p.model, %9$L, '') AS sm FROM p) k
        JOIN %1$I.model_prices mp
          ON (mp.provider IS NULL OR mp.provider = k.provider)
         AND %7$s
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
    LEFT JOIN LATERAL (
        SELECT c.* FROM c
        WHERE c.k_provider IS NOT DISTINCT FROM p.provider AND c.k_model IS NOT DISTINCT FROM p.model
          AND p.min_start >= c.valid_from AND p.min_start < c.valid_to
        ORDER BY %8$s
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
    ) x)$part$, s, g, hi_m, mixed, CASE WHEN p_team THEN 'p.team' ELSE 'NULL::text' END, inside,
        {{schema}}.postgrescopy_price_match('mp', 'k.model', 'k.sm'), {{schema}}.postgrescopy_price_rank('c', 'c.k_model'),
        {{schema}}.postgrescopy_model_prefix());
    END IF;
    RETURN QUERY EXECUTE q;
END
$groups$;

-- ai_spend_aggregate (the rollup's and ai_spend's): no_tokens_calls too.
CREATE OR REPLACE FUNCTION {{schema}}.ai_spend_aggregate(p_from timestamptz, p_to timestamptz)
RETURNS SETOF {{schema}}.ai_spend_hourly
LANGUAGE sql STABLE
AS $agg$
    SELECT date_trunc('hour', g.minute, 'UTC'), g.provider, g.model, g.dims, g.currency,
           sum(g.calls)::bigint, sum(g.reported_calls)::bigint, sum(g.catalog_calls)::bigint,
           sum(g.unpriced_calls)::bigint, sum(g.error_calls)::bigint, sum(g.duration_ns)::bigint,
           sum(g.input_tokens)::bigint, sum(g.uncached_input_tokens)::bigint, sum(g.cache_read_tokens)::bigint,
           sum(g.cache_creation_tokens)::bigint, sum(g.output_tokens)::bigint, sum(g.reasoning_tokens)::bigint,
           coalesce(sum(g.reported_cost), 0), coalesce(sum(g.computed_cost), 0), coalesce(sum(g.cost), 0),
           sum(g.no_tokens_calls)::bigint
    FROM {{schema}}.ai_spend_groups(p_from, true, p_to, false, false) g
    GROUP BY 1, 2, 3, 4, 5
$agg$;

-- postgrescopy_maintain: as in version 5, and it sets live_from, the first
-- hour its next run recomputes.
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
        DELETE FROM {{schema}}.ai_spend_partial WHERE minute < now() - p_retention - p_interval;
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

-- ai_spend: the rollup before live_from, the calls from it on (see the top
-- of this file). Queries read this and filter hour.
CREATE OR REPLACE VIEW {{schema}}.ai_spend AS
SELECT h.* FROM {{schema}}.ai_spend_hourly h
WHERE h.hour < (SELECT coalesce(live_from, rolled_to - late_window, '-infinity') FROM {{schema}}.ai_spend_settings)
UNION ALL
SELECT a.* FROM {{schema}}.ai_spend_aggregate(
    (SELECT coalesce(live_from, rolled_to - late_window, '-infinity') FROM {{schema}}.ai_spend_settings), 'infinity') a;

-- The views remade, and the capture with them, without recomputing the
-- partials (see the top): the calls text they are made from is stored as
-- the partials' own.
DO $apply$
DECLARE
    st    record;
    v     text;
    i     integer;
    j     integer;
BEGIN
    SELECT * INTO st FROM {{schema}}.ai_spend_settings;
    PERFORM {{schema}}.postgrescopy_ai_configure_views(st.dimensions, NULL);
    IF st.partial_from <> 'infinity' AND st.partial_sql IS NOT NULL
       AND to_regprocedure(format('%I.postgrescopy_ai_capture()', {{schema_lit}})) IS NOT NULL THEN
        v := (SELECT view_sql FROM {{schema}}.ai_spend_settings);
        i := position('gen_ai_spans AS' IN v);
        j := position(';' || chr(10) || 'CREATE OR REPLACE VIEW' IN v);
        UPDATE {{schema}}.ai_spend_settings
        SET partial_sql = substr(v, i + length('gen_ai_spans AS'), j - i - length('gen_ai_spans AS'));
        PERFORM {{schema}}.postgrescopy_ai_capture_make();
    END IF;
END
$apply$;
