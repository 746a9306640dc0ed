-- postgrescopy schema version 9: long string attributes stored as text.
--
-- PostgreSQL lexes every string of a jsonb value a character at a time on
-- input, where a text value is only validated: a long attribute value (a
-- prompt, a query, a stack trace) costs more as jsonb than as text. The
-- exporter now stores the top-level string attributes of more than 256
-- bytes of span_attributes and log_attributes apart, in
-- span_attributes_long and log_attributes_long: a text[] of alternating
-- keys and values, NULL when a row has none; the jsonb column holds the
-- others. The spans and logs views show the two merged under the jsonb
-- column's name (span_attributes || jsonb_object(span_attributes_long)), and
-- not the text[] column: every reader, the AI spend views included, reads
-- the same attributes as before. A new nullable column without a default is
-- catalog work only, instant at any size.
--
-- The AI spend capture (versions 5 and 6) reads the COPY's stored rows, not
-- the view: its function is remade to merge them likewise, without
-- recomputing the partials or moving partial_from (which would send every
-- earlier minute to the raw calls).

ALTER TABLE {{schema}}.spans_rows ADD COLUMN IF NOT EXISTS span_attributes_long text[];
ALTER TABLE {{schema}}.logs_rows ADD COLUMN IF NOT EXISTS log_attributes_long text[];

-- postgrescopy_read_columns: how the stored table p_table's columns are read
-- as its view reads them (from r), in attnum order: a jsonb column X whose
-- table has a text[] column X_long is the two merged, and X_long is not
-- listed.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_read_columns(p_table regclass)
RETURNS TABLE (attnum smallint, attname name, expr text)
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $read$
    SELECT a.attnum, a.attname,
           CASE WHEN l.attname IS NULL THEN format('r.%I', a.attname)
                ELSE format('CASE WHEN r.%2$I IS NULL THEN r.%1$I ELSE r.%1$I || jsonb_object(r.%2$I) END AS %1$I', a.attname, l.attname)
           END
    FROM pg_attribute a
    LEFT JOIN pg_attribute l ON a.atttypid = 'jsonb'::regtype
         AND l.attrelid = a.attrelid AND l.attname = a.attname || '_long' AND l.atttypid = 'text[]'::regtype
         AND l.attnum > 0 AND NOT l.attisdropped
    WHERE a.attrelid = p_table AND a.attnum > 0 AND NOT a.attisdropped
      AND NOT EXISTS (SELECT 1 FROM pg_attribute j
                      WHERE a.atttypid = 'text[]'::regtype AND j.attrelid = a.attrelid AND j.atttypid = 'jsonb'::regtype
                        AND j.attname || '_long' = a.attname AND j.attnum > 0 AND NOT j.attisdropped)
    ORDER BY a.attnum
$read$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_read_columns(regclass) FROM PUBLIC;

-- postgrescopy_views: as in version 3, each column read as
-- postgrescopy_read_columns says; promoted columns are still appended.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_views()
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp
AS $views$
DECLARE
    s    constant text := {{schema_lit}};
    ctx  constant text[] := ARRAY['scope_name', 'scope_version', 'resource_attributes', 'scope_attributes',
        'resource_dropped_attributes_count', 'scope_dropped_attributes_count', 'resource_schema_url', 'scope_schema_url'];
    t    text;
    cols text;
BEGIN
    FOREACH t IN ARRAY ARRAY['spans', 'logs', 'metrics_gauge', 'metrics_sum', 'metrics_histogram',
                             'metrics_exponential_histogram', 'metrics_summary'] LOOP
        SELECT string_agg(CASE WHEN a.attname = ANY (ctx) THEN format('coalesce(r.%1$I, c.%1$I) AS %1$I', a.attname)
                               ELSE a.expr END, ', ' ORDER BY a.attnum)
        INTO cols
        FROM {{schema}}.postgrescopy_read_columns(format('%I.%I', s, t || '_rows')::regclass) a
        WHERE a.attname <> 'context_id';
        EXECUTE format('CREATE OR REPLACE VIEW %1$I.%2$I AS SELECT %3$s FROM %1$I.%4$I r LEFT JOIN %1$I.contexts c ON c.context_id = r.context_id',
                       s, t, cols, t || '_rows');
    END LOOP;
END
$views$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_views() FROM PUBLIC;

SELECT {{schema}}.postgrescopy_views();

-- postgrescopy_ai_partial_query: version 5's aggregation of calls (the
-- gen_ai_spans select) into partial rows, with p_where after it; the
-- capture and the recomputation both read it.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_partial_query(p_calls text, p_where text)
RETURNS text
LANGUAGE sql STABLE SET search_path = pg_catalog, pg_temp
AS $query$
    SELECT format($agg$
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
GROUP BY 1, 4, 5, 6, 7, 8, 9, 10, 11$agg$, p_calls, p_where)
$query$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_partial_query(text, text) FROM PUBLIC;

-- postgrescopy_ai_capture_make (re)makes the capture trigger's function from
-- the stored calls text (partial_sql): the same call expressions over the
-- COPY's stored rows, read as the spans view reads them (long attributes
-- merged, the context joined), the table sized by its live rows (version 6).
-- It recomputes nothing.
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
    INSERT INTO %1$I.ai_spend_partial %2$s;
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

-- postgrescopy_ai_partials_generate: as in version 5, the capture made by
-- postgrescopy_ai_capture_make from the calls text it stores first.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_partials_generate(p_force boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $partials$
DECLARE
    s     constant text := {{schema_lit}};
    st    record;
    v     text;
    calls text;
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

    UPDATE {{schema}}.ai_spend_settings SET partial_sql = calls;
    PERFORM {{schema}}.postgrescopy_ai_capture_make();
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
    EXECUTE format('INSERT INTO %I.ai_spend_partial ', s)
            || {{schema}}.postgrescopy_ai_partial_query(calls, format('WHERE c.start_time >= %L', cut));
    UPDATE {{schema}}.ai_spend_settings SET partial_from = cut;
END
$partials$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_partials_generate(boolean) FROM PUBLIC;

-- The capture in place is remade when partials are on; on Citus
-- (partial_from infinity, no trigger) there is none to make.
DO $capture$
BEGIN
    IF EXISTS (SELECT 1 FROM {{schema}}.ai_spend_settings st WHERE st.partial_from <> 'infinity' AND st.partial_sql IS NOT NULL)
       AND to_regprocedure(format('%I.postgrescopy_ai_capture()', {{schema_lit}})) IS NOT NULL THEN
        PERFORM {{schema}}.postgrescopy_ai_capture_make();
    END IF;
END
$capture$;
