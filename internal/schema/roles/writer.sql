-- A least-privilege role for running the exporter with create_schema: false.
-- Run as the owner of the schema (the role that ran the migrations), with
-- {{schema}} and {{role}} replaced. The role can write telemetry, keep the
-- ledger, record rejects and quarantined entries, and run partition
-- maintenance (through the owner's SECURITY DEFINER function); it cannot
-- create, alter or drop anything.
GRANT USAGE ON SCHEMA {{schema}} TO {{role}};
GRANT INSERT ON {{schema}}.spans_rows, {{schema}}.logs_rows,
    {{schema}}.metrics_gauge_rows, {{schema}}.metrics_sum_rows, {{schema}}.metrics_histogram_rows,
    {{schema}}.metrics_exponential_histogram_rows, {{schema}}.metrics_summary_rows,
    {{schema}}.contexts, {{schema}}.rejects, {{schema}}.quarantine TO {{role}};
GRANT SELECT, INSERT, DELETE ON {{schema}}.ledger TO {{role}};
GRANT SELECT ON {{schema}}.schema_version TO {{role}};
GRANT EXECUTE ON FUNCTION {{schema}}.postgrescopy_maintain(interval, integer, interval) TO {{role}};
-- The writer copies spans straight into a partition of spans_rows when it
-- can (schema version 8): the partitions made so far get the grant now,
-- later ones when postgrescopy_maintain makes them.
SELECT {{schema}}.postgrescopy_partition_triggers();
