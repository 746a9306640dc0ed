-- postgrescopy schema version 3: the context dictionary.
--
-- A row's resource and instrumentation scope (the eight scope_* and
-- resource_* columns) are the same for thousands of rows: ~410 bytes of
-- jsonb that PostgreSQL parsed, stored and compressed for every row. They are
-- now stored once, in contexts, and each row references its context by
-- context_id: the first 128 bits of the SHA-256 of the context's eight fields
-- as the exporter encodes them for COPY, so every replica computes the same
-- id and the dictionary keeps one row per context. The exporter inserts a
-- context it has not seen committed (INSERT ... ON CONFLICT DO NOTHING) in
-- the transaction that copies the rows referencing it. Rows are never
-- deleted from contexts: a context is a few hundred bytes.
--
-- Each signal table becomes <table>_rows, where the rows are stored, and
-- <table> is a view with the table's columns in their order, which joins
-- every row to its context: queries, dashboards and the AI spend views read
-- the same columns as before. The migration is catalog work only (a rename,
-- a new nullable column, dropped NOT NULLs, views), instant at any size.
-- Rows written before it keep their eight columns (context_id NULL), and so
-- do rows of the previous release's Redis entries still pending at the
-- upgrade: the view reads a row's own columns when it has them
-- (coalesce(own, context's)), so both kinds read the same. The partitions
-- keep their names (spans_p20261201_0000, spans_default).

CREATE TABLE IF NOT EXISTS {{schema}}.contexts (
    context_id                        uuid        PRIMARY KEY,
    scope_name                        text,
    scope_version                     text,
    resource_attributes               jsonb       NOT NULL,
    scope_attributes                  jsonb       NOT NULL,
    resource_dropped_attributes_count integer     NOT NULL,
    scope_dropped_attributes_count    integer     NOT NULL,
    resource_schema_url               text,
    scope_schema_url                  text
);

-- On a schema Citus distributes already (distributed at version 1 or 2),
-- contexts is a reference table at once, as citus/distribute.sql makes it
-- later otherwise: Citus changes a view over distributed tables on the
-- workers only when every table it joins is distributed.
DO $contexts$
DECLARE
    distributed boolean := false;
BEGIN
    IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1::regclass)'
            INTO distributed USING format('%I.spans', {{schema_lit}});
    END IF;
    IF distributed THEN
        EXECUTE 'SELECT create_reference_table($1)' USING format('%I.contexts', {{schema_lit}});
    END IF;
END
$contexts$;

-- postgrescopy_views (re)creates the view of every signal table from its
-- stored table's columns: after this migration, and after promoted columns
-- are added (they are added to <table>_rows and appended to the view).
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
                               ELSE format('r.%I', a.attname) END, ', ' ORDER BY a.attnum)
        INTO cols
        FROM pg_attribute a
        WHERE a.attrelid = format('%I.%I', s, t || '_rows')::regclass AND a.attnum > 0
          AND NOT a.attisdropped AND a.attname <> 'context_id';
        EXECUTE format('CREATE OR REPLACE VIEW %1$I.%2$I AS SELECT %3$s FROM %1$I.%4$I r LEFT JOIN %1$I.contexts c ON c.context_id = r.context_id',
                       s, t, cols, t || '_rows');
    END LOOP;
END
$views$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_views() FROM PUBLIC;

DO $contexts$
DECLARE
    s   constant text := {{schema_lit}};
    t   text;
    c   text;
    g   record;
BEGIN
    FOREACH t IN ARRAY ARRAY['spans', 'logs', 'metrics_gauge', 'metrics_sum', 'metrics_histogram',
                             'metrics_exponential_histogram', 'metrics_summary'] LOOP
        EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', s, t, t || '_rows');
        EXECUTE format('ALTER TABLE %I.%I ADD COLUMN context_id uuid', s, t || '_rows');
        FOREACH c IN ARRAY ARRAY['resource_attributes', 'scope_attributes',
                                 'resource_dropped_attributes_count', 'scope_dropped_attributes_count'] LOOP
            EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN %I DROP NOT NULL', s, t || '_rows', c);
        END LOOP;
    END LOOP;
    PERFORM {{schema}}.postgrescopy_views();
    FOREACH t IN ARRAY ARRAY['spans', 'logs', 'metrics_gauge', 'metrics_sum', 'metrics_histogram',
                             'metrics_exponential_histogram', 'metrics_summary'] LOOP
        -- Who could read the table reads its view; who could insert into
        -- it (the writer role) inserts contexts too.
        FOR g IN SELECT DISTINCT a.grantee::regrole::text AS role, a.privilege_type AS priv
                 FROM pg_class cl, aclexplode(cl.relacl) a
                 WHERE cl.oid = format('%I.%I', s, t || '_rows')::regclass
                   AND a.grantee <> 0 AND a.grantee <> cl.relowner
                   AND a.privilege_type IN ('SELECT', 'INSERT') LOOP
            IF g.priv = 'SELECT' THEN
                EXECUTE format('GRANT SELECT ON %I.%I TO %s', s, t, g.role);
            ELSE
                EXECUTE format('GRANT INSERT ON %I.contexts TO %s', s, g.role);
            END IF;
        END LOOP;
    END LOOP;
    -- The AI spend views read the spans view from now on (they were bound
    -- to the table, now spans_rows).
    PERFORM {{schema}}.postgrescopy_ai_configure(st.dimensions, NULL) FROM {{schema}}.ai_spend_settings st;
END
$contexts$;

-- Partitions are made of the stored tables from now on, named as before.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_maintain_partitions(p_interval interval, p_premake integer, p_retention interval)
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
    parent text;
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
        parent := t.tbl || '_rows';
        FOR i IN -1..p_premake LOOP
            lo := base + i * p_interval;
            hi := lo + p_interval;
            name := t.tbl || '_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI');
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                                  WHERE ns.nspname = s AND c.relname = name);
            BEGIN
                EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                               s, name, s, parent, lo, hi);
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
            WHERE inh.inhparent = format('%I.%I', s, parent)::regclass
        LOOP
            CONTINUE WHEN p.bound = 'DEFAULT';
            upper_bound := substring(p.bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
            IF upper_bound <= now() - p_retention THEN
                EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %I.%I', s, parent, s, p.relname);
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
