-- postgrescopy schema version 15: a partition is made even when the default
-- partition holds rows of its range, and retention bounds the default
-- partition on both sides.
--
-- A row dated beyond the partitions made ahead (a clock days fast) lands in
-- the default partition. PostgreSQL refuses to add a partition whose range
-- has rows in the default one ("updated partition constraint for default
-- partition ... would be violated"), so until version 14 that day's
-- partition was never made, and every row of that day went to the default
-- partition too, where retention could only DELETE them. Now maintenance
-- moves those rows into the new partition in the same transaction: the
-- partition is made as a table of its own (LIKE the stored table), the rows
-- are deleted from the default partition into it, and it is attached. On
-- one PostgreSQL this locks the stored table in SHARE UPDATE EXCLUSIVE mode
-- (writes go on) and the default partition in ACCESS EXCLUSIVE mode (writes
-- of rows that fall in it wait) until maintenance commits. A partition of a
-- Citus distributed table is made with CREATE TABLE ... PARTITION OF, as
-- before, the rows of its range parked in a temporary table meanwhile: the
-- workers check their default shards as PostgreSQL does.
--
-- Retention judges a row by its time, wherever it is stored: it drops the
-- partitions older than the retention and deletes the default partition's
-- rows older than it (a zero time is 1970, so at the next run), and now also
-- those dated more than the retention beyond the last partition made ahead
-- (a clock years fast), which would otherwise be kept for as many years.

CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_make_partitions(p_interval interval, p_premake integer, p_retention interval)
RETURNS TABLE (action text, partition_name text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $maintain$
DECLARE
    s     constant text := {{schema_lit}};
    t     record;
    p     record;
    step  double precision := extract(epoch FROM p_interval);
    base  timestamptz;
    ahead timestamptz;
    lo    timestamptz;
    hi    timestamptz;
    name  text;
    parent text;
    def   text;
    cols  text;
    citus boolean;
    found_rows boolean;
    upper_bound timestamptz;
    n     bigint;
BEGIN
    IF step < 60 THEN
        RAISE EXCEPTION 'postgrescopy_maintain: interval % is shorter than a minute', p_interval;
    END IF;
    IF NOT pg_try_advisory_xact_lock(hashtext('postgrescopy_maintain/' || s)) THEN
        RETURN;
    END IF;
    base := to_timestamp(floor(extract(epoch FROM now()) / step) * step);
    ahead := base + (p_premake + 1) * p_interval; -- the end of the last partition made ahead
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
        def := t.tbl || '_default';
        citus := to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL;
        IF citus THEN
            EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass)'
                INTO citus USING format('%I.%I', s, parent);
        END IF;
        -- The stored table's columns in order, for moving rows between
        -- tables whose columns may have been added in another order.
        SELECT string_agg(quote_ident(a.attname), ', ' ORDER BY a.attnum) INTO cols
        FROM pg_attribute a
        WHERE a.attrelid = format('%I.%I', s, parent)::regclass AND a.attnum > 0 AND NOT a.attisdropped;
        FOR i IN -1..p_premake LOOP
            lo := base + i * p_interval;
            hi := lo + p_interval;
            name := t.tbl || '_p' || to_char(lo AT TIME ZONE 'UTC', 'YYYYMMDD"_"HH24MI');
            CONTINUE WHEN EXISTS (SELECT 1 FROM pg_class c JOIN pg_namespace ns ON ns.oid = c.relnamespace
                                  WHERE ns.nspname = s AND c.relname = name);
            BEGIN
                action := 'created'; partition_name := name; detail := NULL;
                EXECUTE format('SELECT EXISTS (SELECT 1 FROM %I.%I WHERE %I >= $1 AND %I < $2)', s, def, t.col, t.col)
                    INTO found_rows USING lo, hi;
                IF citus THEN
                    IF found_rows THEN
                        DROP TABLE IF EXISTS pg_temp.postgrescopy_moving;
                        EXECUTE format('CREATE TEMPORARY TABLE postgrescopy_moving ON COMMIT DROP AS SELECT %s FROM %I.%I WITH NO DATA',
                                       cols, s, parent);
                        EXECUTE format('WITH moved AS (DELETE FROM %1$I.%2$I WHERE %3$I >= $1 AND %3$I < $2 RETURNING %4$s) '
                                       'INSERT INTO pg_temp.postgrescopy_moving (%4$s) SELECT %4$s FROM moved',
                                       s, def, t.col, cols) USING lo, hi;
                        GET DIAGNOSTICS n = ROW_COUNT;
                    END IF;
                    EXECUTE format('CREATE TABLE %I.%I PARTITION OF %I.%I FOR VALUES FROM (%L) TO (%L)',
                                   s, name, s, parent, lo, hi);
                    IF found_rows THEN
                        EXECUTE format('INSERT INTO %I.%I (%s) SELECT %s FROM pg_temp.postgrescopy_moving', s, name, cols, cols);
                        DROP TABLE pg_temp.postgrescopy_moving;
                    END IF;
                ELSE
                    -- A table of its own first: attaching it locks the
                    -- stored table in SHARE UPDATE EXCLUSIVE mode, which
                    -- writes do not wait for (CREATE TABLE ... PARTITION OF
                    -- takes ACCESS EXCLUSIVE). No trigger yet: the moved
                    -- rows were captured when they arrived, and
                    -- postgrescopy_partition_triggers gives it the capture
                    -- trigger afterwards.
                    EXECUTE format('CREATE TABLE %I.%I (LIKE %I.%I INCLUDING DEFAULTS INCLUDING CONSTRAINTS '
                                   'INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)', s, name, s, parent);
                    IF found_rows THEN
                        -- The locks ATTACH takes, in its order, before the
                        -- rows move: none of the range can reach the default
                        -- partition between the move and the attach.
                        EXECUTE format('LOCK TABLE ONLY %I.%I IN SHARE UPDATE EXCLUSIVE MODE', s, parent);
                        EXECUTE format('LOCK TABLE ONLY %I.%I IN ACCESS EXCLUSIVE MODE', s, def);
                        EXECUTE format('WITH moved AS (DELETE FROM %1$I.%2$I WHERE %3$I >= $1 AND %3$I < $2 RETURNING %4$s) '
                                       'INSERT INTO %1$I.%5$I (%4$s) SELECT %4$s FROM moved',
                                       s, def, t.col, cols, name) USING lo, hi;
                        GET DIAGNOSTICS n = ROW_COUNT;
                    END IF;
                    EXECUTE format('ALTER TABLE %I.%I ATTACH PARTITION %I.%I FOR VALUES FROM (%L) TO (%L)',
                                   s, parent, s, name, lo, hi);
                END IF;
                IF found_rows THEN
                    detail := n || ' rows moved from ' || def;
                END IF;
                RETURN NEXT;
            EXCEPTION WHEN others THEN
                -- An overlapping partition (the interval was changed), a
                -- lock not granted: nothing of it is left (the rows moved
                -- are back in the default partition), and the next run
                -- tries again.
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
        EXECUTE format('DELETE FROM %1$I.%2$I WHERE %3$I < $1 OR %3$I >= $2', s, def, t.col)
            USING now() - p_retention, ahead + p_retention;
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            action := 'expired'; partition_name := def; detail := n || ' rows';
            RETURN NEXT;
        END IF;
    END LOOP;
END
$maintain$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_make_partitions(interval, integer, interval) FROM PUBLIC;
