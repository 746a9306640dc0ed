-- postgrescopy schema version 8: the AI spend capture trigger on every
-- partition of spans_rows, so that spans can be copied into a partition.
--
-- PostgreSQL 15 inserts a COPY's rows one at a time, without its
-- multi-insert buffers, when the target is a partitioned table that has a
-- trigger with a transition table: spans_rows has one, the capture trigger
-- of version 5. A COPY into a partition itself keeps the buffers, and fires
-- that partition's statement triggers, not its parent's. So each partition
-- of spans_rows now carries the same capture trigger (the same function),
-- and the writer copies a batch whose spans all fall in one partition
-- straight into it (pgwrite's partition routing, which checks in the
-- write's transaction that the partition is still attached and has the
-- parent's statement triggers). A COPY into spans_rows fires the parent's
-- trigger alone: every COPY is captured once.
--
-- A partition may also be written directly only by a role that may insert
-- into it: the roles that may insert into spans_rows get the same grant on
-- its partitions.

-- postgrescopy_partition_triggers gives every plain partition of spans_rows
-- the capture trigger when spans_rows has it, and drops it from them when
-- spans_rows has none (Citus, a bench without capture); and grants INSERT on
-- them to the roles that may insert into spans_rows.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_partition_triggers()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $partitions$
DECLARE
    s      constant text := {{schema_lit}};
    parent constant regclass := format('%I.spans_rows', s)::regclass;
    has    boolean;
    p      record;
    g      record;
BEGIN
    has := EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = parent AND tgname = 'postgrescopy_ai_capture');
    FOR p IN SELECT c.oid, c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = parent AND c.relkind = 'r'
    LOOP
        IF has = EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = p.oid AND tgname = 'postgrescopy_ai_capture') THEN
            NULL;
        ELSIF NOT has THEN
            EXECUTE format('DROP TRIGGER postgrescopy_ai_capture ON %I.%I', s, p.relname);
        ELSE
            EXECUTE format('CREATE TRIGGER postgrescopy_ai_capture AFTER INSERT ON %1$I.%2$I '
                           'REFERENCING NEW TABLE AS postgrescopy_new_spans FOR EACH STATEMENT '
                           'EXECUTE FUNCTION %1$I.postgrescopy_ai_capture()', s, p.relname);
        END IF;
        FOR g IN SELECT a.grantee::regrole::text AS role
                 FROM pg_class c, aclexplode(c.relacl) a
                 WHERE c.oid = parent AND a.privilege_type = 'INSERT' AND a.grantee <> 0
                   AND a.grantee <> c.relowner AND NOT has_table_privilege(a.grantee, p.oid, 'INSERT')
        LOOP
            EXECUTE format('GRANT INSERT ON %I.%I TO %s', s, p.relname, g.role);
        END LOOP;
    END LOOP;
END
$partitions$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_partition_triggers() FROM PUBLIC;

-- Partition maintenance gives the partitions it makes the trigger: the
-- partition work of version 3 is renamed, unchanged, and
-- postgrescopy_maintain_partitions (which postgrescopy_maintain calls) does
-- it and then the above.
ALTER FUNCTION {{schema}}.postgrescopy_maintain_partitions(interval, integer, interval) RENAME TO postgrescopy_make_partitions;

CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_maintain_partitions(p_interval interval, p_premake integer, p_retention interval)
RETURNS TABLE (action text, partition_name text, detail text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $maintain$
BEGIN
    RETURN QUERY SELECT * FROM {{schema}}.postgrescopy_make_partitions(p_interval, p_premake, p_retention);
    PERFORM {{schema}}.postgrescopy_partition_triggers();
END
$maintain$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_maintain_partitions(interval, integer, interval) FROM PUBLIC;

SELECT {{schema}}.postgrescopy_partition_triggers();
