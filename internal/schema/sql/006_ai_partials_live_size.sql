-- postgrescopy schema version 6: the AI spend partials stay merged.
--
-- A COPY merges the late window's partials with the chance of its new rows
-- over the table's rows, so that merges come about once the table doubled.
-- Version 5's capture read the table's rows from pg_class.reltuples, which
-- only VACUUM and ANALYZE set: once a merge had shrunk the table, the count
-- stayed at what the last ANALYZE saw before it, merges came that many times
-- too seldom, and the table grew back to many rows per group and minute for
-- every reader of ai_spend_groups to sum. The statistics system's live row
-- count follows each commit within about a second, deletes included.
--
-- The capture function is generated (postgrescopy_ai_partials): its text is
-- rewritten in place, with no recomputation of the partials, and every later
-- generation gets the same rewrite.

ALTER FUNCTION {{schema}}.postgrescopy_ai_partials(boolean) RENAME TO postgrescopy_ai_partials_generate;

-- postgrescopy_ai_capture_live_size rewrites the generated capture function
-- to size the table by its live rows; nothing to do when there is none yet,
-- or when it already does.
CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_capture_live_size()
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $live$
DECLARE
    stale constant text := '(SELECT c.reltuples FROM pg_class c WHERE c.oid = ';
    f     regprocedure := to_regprocedure(format('%I.postgrescopy_ai_capture()', {{schema_lit}}));
    def   text;
BEGIN
    IF f IS NULL THEN
        RETURN;
    END IF;
    def := pg_get_functiondef(f);
    IF position(stale IN def) > 0 THEN
        EXECUTE replace(def, stale, 'pg_stat_get_live_tuples(');
    END IF;
END
$live$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_capture_live_size() FROM PUBLIC;

CREATE OR REPLACE FUNCTION {{schema}}.postgrescopy_ai_partials(p_force boolean)
RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
AS $partials$
BEGIN
    PERFORM {{schema}}.postgrescopy_ai_partials_generate(p_force);
    PERFORM {{schema}}.postgrescopy_ai_capture_live_size();
END
$partials$;
REVOKE ALL ON FUNCTION {{schema}}.postgrescopy_ai_partials(boolean) FROM PUBLIC;

SELECT {{schema}}.postgrescopy_ai_capture_live_size();
