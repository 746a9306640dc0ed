-- postgrescopy schema version 4: time partitioning.
--
-- Every signal table becomes a table partitioned by range of its time column.
-- The rows written before this version are kept: the old table is renamed
-- <table>_default and attached as the DEFAULT partition (instant, no copy),
-- which from then on also catches any row outside the partitions made ahead
-- of time (a clock at zero, a year-old replay): no timestamp is ever refused.
-- postgrescopy_maintain() below makes partitions ahead of now and drops
-- expired ones; the exporter calls it at start and on a schedule.

DO $migrate$
DECLARE
    t record;
    idx record;
BEGIN
    FOR t IN SELECT * FROM (VALUES
        ('spans', 'start_time'),
        ('logs', 'timestamp'),
        ('metrics_gauge', 'time'),
        ('metrics_sum', 'time'),
        ('metrics_histogram', 'time'),
        ('metrics_exponential_histogram', 'time'),
        ('metrics_summary', 'time')) AS v(tbl, col)
    LOOP
        -- The version 1 indexes go: the parent gets its own set, which
        -- PostgreSQL builds on every partition, the default one included.
        FOR idx IN SELECT indexname FROM pg_indexes WHERE schemaname = {{schema_lit}} AND tablename = t.tbl LOOP
            EXECUTE format('DROP INDEX %I.%I', {{schema_lit}}, idx.indexname);
        END LOOP;
        EXECUTE format('ALTER TABLE %I.%I RENAME TO %I', {{schema_lit}}, t.tbl, t.tbl || '_default');
        EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING COMPRESSION) PARTITION BY RANGE (%I)',
                       {{schema_lit}}, t.tbl, {{schema_lit}}, t.tbl || '_default', t.col);
        EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I DEFAULT',
                       {{schema_lit}}, t.tbl, {{schema_lit}}, t.tbl || '_default');
    END LOOP;
END
$migrate$;

-- postgrescopy_maintain makes the partitions of [now - p_interval, now +
-- p_premake × p_interval] that do not exist, and drops the partitions whose
-- whole range is older than p_retention (NULL keeps everything), and deletes
-- expired rows from the default partitions. Partition bounds are multiples of
-- p_interval since the Unix epoch, so replicas agree on them. It runs as its
-- owner (SECURITY DEFINER), so that a role that may only write can be granted
-- EXECUTE on it; it does nothing when another session is already running it.
-- It returns what it did, one row per partition.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_maintain(p_interval interval, p_premake integer, p_retention interval)
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
        FOR i IN -1..p_premake LOOP
            lo := base + i * p_interval;
            hi := lo + p_interval;
            name := t.tbl || '_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI');
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                                  WHERE ns.nspname = s AND c.relname = name);
            BEGIN
                EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                               s, name, s, t.tbl, lo, hi);
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
            WHERE inh.inhparent = format('%I.%I', s, t.tbl)::regclass
        LOOP
            CONTINUE WHEN p.bound = 'DEFAULT';
            upper_bound := substring(p.bound FROM 'TO \(''([^'']+)''\)')::timestamptz;
            IF upper_bound <= now() - p_retention THEN
                EXECUTE format('ALTER TABLE %I.%I DETACH PARTITION %I.%I', s, t.tbl, s, p.relname);
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

-- Functions are executable by PUBLIC by default; this one drops partitions.
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_maintain(interval, integer, interval) FROM PUBLIC;
