-- Citus (distribution: citus): run on the coordinator after the migrations
-- and the index set. A table already distributed is left as it is, so this
-- is safe to run at every start. The tables keep their time partitioning;
-- Citus distributes every partition with its parent, and the partitions
-- postgrescopy_maintain makes later. What is distributed are the stored
-- tables (spans_rows, logs_rows, metrics_*_rows) under the views of the same
-- names without _rows; the context dictionary they join is a reference table.
--
--   spans             hash-distributed by trace_id: a trace's spans share a
--                     shard, so the trace lookup and the parent/child join of
--                     queries/ run on one shard each, unchanged.
--   logs              hash-distributed by shard_key, colocated with spans.
--                     shard_key is the trace id when the log has one (its
--                     trace's shard; a lookup of a trace's logs by
--                     shard_key = id AND trace_id = id is single-shard); a
--                     log outside any trace gets a key derived from the row,
--                     so such logs spread over every shard.
--   metrics_*         hash-distributed by shard_key and colocated with each
--                     other; shard_key is derived from the point's series, so
--                     a series stays on one shard and the many series of one
--                     metric name spread.
--   ledger, rejects,  reference tables (replicated to every node): small,
--   quarantine,       and the ledger's primary key stays enforced.
--   schema_version,
--   contexts
--   model_prices      a reference table too: the cost views join every call
--                     to its price (LEFT JOIN LATERAL), which Citus runs on
--                     the workers only against a reference table. The AI
--                     spend rollups stay on the coordinator.
--
-- shard_key exists only here: one PostgreSQL does not carry it. Rows that
-- the tables hold already (written before distribution: citus) get theirs
-- before the table is distributed: the trace id, else a random uuid for
-- logs, and an md5 of the series for metric points (not the hash the
-- exporter computes: an old point may sit on another shard than newer
-- points of its series, which no query's result depends on). A span without
-- a trace id (invalid OTLP: no distribution column value) is moved to
-- rejects, as a new one would be. On a large table that UPDATE and the copy
-- to the workers take a maintenance window.
DO $distribute$
DECLARE
    s      constant text := {{schema_lit}};
    -- Immutable throughout: Citus runs an UPDATE of a distributed table
    -- (an earlier release's, see below) only with immutable expressions.
    series constant text := 'md5(coalesce(service_name, '''') || chr(31) || metric_name || chr(31) || '
                            'attributes::text || chr(31) || coalesce(resource_attributes::text, context_id::text, ''''))::uuid';
    t      record;
    col    text;
    dist   text;
    unsafe text;
    n      bigint;
BEGIN
    -- AI spend partials (migration 5) come from a statement trigger's
    -- transition table, which a COPY into a distributed table does not
    -- fill on the coordinator: the trigger goes, and every AI spend read
    -- stays on the raw calls (partial_from infinity). Citus distributes no
    -- table with triggers, and refuses trigger DDL on a distributed table
    -- (even DROP TRIGGER IF EXISTS of none) unless
    -- citus.enable_unsafe_triggers is on: so the trigger is dropped only
    -- where it is, which is before spans_rows is distributed (migration 5
    -- makes none on a distributed table), and a restart runs no trigger DDL.
    IF to_regclass(format('%I.ai_spend_partial', s)) IS NOT NULL THEN
        IF EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = format('%I.spans_rows', s)::regclass
                   AND tgname = 'postgrescopy_ai_capture') THEN
            -- One made by hand on the distributed table is dropped with the
            -- setting on for this statement alone.
            unsafe := current_setting('citus.enable_unsafe_triggers');
            PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
            EXECUTE format('DROP TRIGGER postgrescopy_ai_capture ON %I.spans_rows', s);
            PERFORM set_config('citus.enable_unsafe_triggers', unsafe, true);
        END IF;
        -- and its copies on the partitions (migration 8): none is left
        -- once spans_rows has none, and then this drops nothing.
        PERFORM {{schema}}.postgrescopy_partition_triggers();
        EXECUTE format('UPDATE %I.ai_spend_settings SET partial_from = ''infinity'' WHERE partial_from <> ''infinity''', s);
        GET DIAGNOSTICS n = ROW_COUNT;
        IF n > 0 THEN
            EXECUTE format('TRUNCATE %I.ai_spend_partial', s);
            IF to_regclass(format('%I.ai_spend_partial_hour', s)) IS NOT NULL THEN
                EXECUTE format('TRUNCATE %I.ai_spend_partial_hour', s);
            END IF;
        END IF;
    END IF;
    FOR t IN SELECT * FROM (VALUES
        ('spans_rows', NULL, NULL),
        ('logs_rows', 'coalesce(trace_id, gen_random_uuid())', 'spans_rows'),
        ('metrics_gauge_rows', series, NULL),
        ('metrics_sum_rows', series, 'metrics_gauge_rows'),
        ('metrics_histogram_rows', series, 'metrics_gauge_rows'),
        ('metrics_exponential_histogram_rows', series, 'metrics_gauge_rows'),
        ('metrics_summary_rows', series, 'metrics_gauge_rows')) AS v(tbl, backfill, colocate)
    LOOP
        dist := CASE WHEN t.tbl = 'spans_rows' THEN 'trace_id' ELSE 'shard_key' END;
        SELECT column_to_column_name(logicalrelid, partkey) INTO col
        FROM pg_dist_partition WHERE logicalrelid = format('%I.%I', s, t.tbl)::regclass;
        IF FOUND THEN
            IF col IS DISTINCT FROM dist THEN
                -- An earlier postgrescopy distributed logs by trace_id (an
                -- absent one stored as the nil uuid) and the metric tables
                -- by metric_name; spans by trace_id as now.
                RAISE EXCEPTION USING
                    ERRCODE = 'object_not_in_prerequisite_state',
                    MESSAGE = format('%I.%I is distributed by %s, not by %s (an earlier postgrescopy distributed it)', s, t.tbl, coalesce(col, 'nothing'), dist),
                    HINT = format('redistribute it once, as its owner, in a maintenance window: '
                        'SELECT truncate_local_data_after_distributing_table(%4$L); '
                        'ALTER TABLE %1$I.%2$I ADD COLUMN IF NOT EXISTS shard_key uuid; '
                        'UPDATE %1$I.%2$I SET shard_key = %3$s WHERE shard_key IS NULL; '
                        'ALTER TABLE %1$I.%2$I ALTER COLUMN shard_key SET NOT NULL; '
                        'SELECT alter_distributed_table(%4$L, distribution_column := %5$L, colocate_with := %6$L)%7$s',
                        s, t.tbl,
                        CASE WHEN t.tbl = 'logs_rows' THEN 'trace_id' ELSE t.backfill END,
                        format('%I.%I', s, t.tbl), 'shard_key',
                        CASE WHEN t.colocate IS NULL THEN 'none' ELSE format('%I.%I', s, t.colocate) END,
                        CASE WHEN t.tbl = 'logs_rows' THEN
                            format('; UPDATE %I.%I SET trace_id = NULL WHERE trace_id = %L', s, t.tbl, '00000000-0000-0000-0000-000000000000')
                        ELSE '' END);
            END IF;
            CONTINUE;
        END IF;
        IF t.tbl = 'spans_rows' THEN
            EXECUTE format($move$
                WITH moved AS (DELETE FROM %1$I.spans_rows WHERE trace_id IS NULL RETURNING *)
                INSERT INTO %1$I.rejects (signal, table_name, sqlstate, error, detail, row_json, tuple)
                SELECT 'traces', 'spans', '22004', 'a span without a trace id cannot be distributed by trace_id',
                       'moved here before distribution: row_json holds the row, tuple is empty', to_jsonb(moved), ''::bytea
                FROM moved$move$, s);
        ELSE
            EXECUTE format('ALTER TABLE %I.%I ADD COLUMN IF NOT EXISTS shard_key uuid', s, t.tbl);
            EXECUTE format('UPDATE %I.%I SET shard_key = %s WHERE shard_key IS NULL', s, t.tbl, t.backfill);
            EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN shard_key SET NOT NULL', s, t.tbl);
        END IF;
        PERFORM create_distributed_table(format('%I.%I', s, t.tbl), dist,
            colocate_with => CASE WHEN t.colocate IS NULL THEN 'none' ELSE format('%I.%I', s, t.colocate) END);
        -- Citus copies the rows to the shards and leaves them in the
        -- coordinator's own table too, never read again but on disk, and
        -- checked by a later SET NOT NULL or CHECK there: they go.
        PERFORM truncate_local_data_after_distributing_table(format('%I.%I', s, t.tbl));
    END LOOP;
    FOR t IN SELECT * FROM unnest(ARRAY['ledger', 'rejects', 'quarantine', 'schema_version', 'model_prices', 'contexts']) AS v(tbl)
    LOOP
        -- model_prices comes with migration 2: a schema distributed before
        -- has it distributed at the next start.
        CONTINUE WHEN to_regclass(format('%I.%I', s, t.tbl)) IS NULL;
        CONTINUE WHEN EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = format('%I.%I', s, t.tbl)::regclass);
        PERFORM create_reference_table(format('%I.%I', s, t.tbl));
        PERFORM truncate_local_data_after_distributing_table(format('%I.%I', s, t.tbl));
    END LOOP;
    -- The views over the stored tables now show shard_key too.
    PERFORM {{schema}}.postgrescopy_views();
END
$distribute$;
