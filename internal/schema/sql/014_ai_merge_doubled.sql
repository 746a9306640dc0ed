-- postgrescopy schema version 14: the AI spend partials merged once they
-- doubled, not by chance.
--
-- Each COPY adds a row per group and minute (and per group and hour) its
-- calls fall in; a merge makes them one again. Versions 5 to 13 merged with
-- the chance of a COPY's rows over the table's, about once the table had
-- doubled on average, but with a long tail: the chance that a table grows
-- k-fold before a merge is about 1/k, so over a day of merges it reaches
-- tens of times its merged size, and every reader of ai_spend_groups sums
-- that many rows per group (the token cost query over 24 hours read 56,000
-- hour rows for 648 groups and hours under sustained ingest). Now a COPY
-- merges when its rows would make the table more than twice what the last
-- merge left (at least 1,000 rows), the table's rows as the statistics
-- count them.
--
-- The statistics count a commit's rows within about a second of it (up to
-- ten once its connection goes idle): until they count the last merge's
-- deletes, the live count still holds the rows it merged, and no COPY
-- merges again on it. ai_spend_merged keeps what the last merge left and
-- the deleted count at which the statistics hold it.

CREATE TABLE IF NOT EXISTS {{schema}}.ai_spend_merged (
    id             boolean PRIMARY KEY DEFAULT true CHECK (id),
    rows_after     bigint  NOT NULL, -- ai_spend_partial's rows after the merge
    deleted_before bigint  NOT NULL, -- the statistics' deleted count before it
    deleted_after  bigint  NOT NULL  -- and once they count the merge's deletes
);

-- postgrescopy_ai_compact: as in version 12, and what it left recorded.
-- Its callers hold the merge lock (hashtext('postgrescopy_ai_compact/' ||
-- schema), transaction-scoped).
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_compact(p_from timestamptz)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $compact$
DECLARE
    del  constant bigint := pg_stat_get_tuples_deleted('{{schema}}.ai_spend_partial'::regclass);
    gone bigint;
BEGIN
    WITH d AS (DELETE FROM {{schema}}.ai_spend_partial WHERE minute >= p_from RETURNING *),
    i AS (
        INSERT INTO {{schema}}.ai_spend_partial
        SELECT minute, min(min_start), max(max_start), provider, model, dims, team, span_kind, has_input, has_tokens, reported,
               sum(calls), sum(error_calls), sum(duration_ns), sum(input_tokens), sum(uncached_input_tokens),
               sum(cache_read_tokens), sum(cache_creation_tokens), sum(output_tokens), sum(reasoning_tokens),
               sum(priced_output_tokens), sum(priced_reasoning_tokens), sum(reported_cost)
        FROM d GROUP BY minute, provider, model, dims, team, span_kind, has_input, has_tokens, reported
    )
    SELECT count(*) INTO gone FROM d;
    PERFORM {{schema}}.postgrescopy_ai_hours(p_from, 'infinity');
    INSERT INTO {{schema}}.ai_spend_merged
    VALUES (true, (SELECT count(*) FROM {{schema}}.ai_spend_partial), del, del + gone)
    ON CONFLICT (id) DO UPDATE SET rows_after = excluded.rows_after, deleted_before = excluded.deleted_before,
                                   deleted_after = excluded.deleted_after;
END
$compact$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_compact(timestamptz) FROM PUBLIC;

-- postgrescopy_ai_merge merges the late window's partials when p_added new
-- rows make the table more than twice what the last merge left, the
-- statistics count that merge, and no other transaction is merging (it
-- skips, it does not wait). The capture calls it with each COPY's partial
-- rows, which the statistics do not count before the COPY commits.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_merge(p_added bigint)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $merge$
DECLARE
    t constant regclass := '{{schema}}.ai_spend_partial'::regclass;
BEGIN
    -- Checked again once the lock is held: a merge may have committed since.
    FOR i IN 1..2 LOOP
        IF EXISTS (SELECT 1 FROM {{schema}}.ai_spend_merged m
                   WHERE pg_stat_get_live_tuples(t) + p_added <= 2 * greatest(m.rows_after, 1000)
                      OR pg_stat_get_tuples_deleted(t) BETWEEN m.deleted_before AND m.deleted_after - 1)
           OR pg_stat_get_live_tuples(t) + p_added <= 2000 THEN
            RETURN;
        END IF;
        IF i = 1 AND NOT pg_try_advisory_xact_lock(hashtext('postgrescopy_ai_compact/' || {{schema_lit}})) THEN
            RETURN;
        END IF;
    END LOOP;
    PERFORM {{schema}}.postgrescopy_ai_compact(now() - (SELECT st.late_window FROM {{schema}}.ai_spend_settings st));
END
$merge$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_merge(bigint) FROM PUBLIC;

-- postgrescopy_ai_capture_make: as in version 12, the merge left to
-- postgrescopy_ai_merge.
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
    -- Each COPY adds a row per group and minute its calls fall in; the
    -- table is merged once it has doubled (postgrescopy_ai_merge).
    IF n > 0 THEN
        PERFORM %1$I.postgrescopy_ai_merge(n);
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

-- The capture remade when there is one (partials on).
DO $remake$
BEGIN
    IF EXISTS (SELECT 1 FROM {{schema}}.ai_spend_settings st WHERE st.partial_from <> 'infinity' AND st.partial_sql IS NOT NULL)
       AND to_regprocedure(format('%I.postgrescopy_ai_capture()', {{schema_lit}})) IS NOT NULL THEN
        PERFORM {{schema}}.postgrescopy_ai_capture_make();
    END IF;
END
$remake$;
