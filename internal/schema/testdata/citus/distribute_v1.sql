-- internal/schema/citus/distribute.sql as of commit be9871a (blob 64d9f8f): how this
-- project distributed schemas at version 1 (the tables without _rows; spans and logs by
-- trace_id, the metric tables by metric_name).
-- TestCitusIntegration/every_migration_on_a_schema_distributed_at_each_earlier_version
-- runs it on a schema migrated to such a version, then migrates that up.

-- Citus (distribution: citus): run on the coordinator after the migrations.
-- Each statement is skipped when its table is already distributed, so this
-- is safe to run at every start. The tables keep their time partitioning;
-- Citus distributes every partition with its parent.
--
--   spans, logs       hash-distributed by trace_id and colocated, so a trace's
--                     spans and logs live on one node and the trace lookup,
--                     the parent/child join and span-log joins stay local.
--   metrics_*         hash-distributed by metric_name and colocated with each
--                     other: a series (name + attributes) is always on one
--                     node, so time aggregations per series stay local.
--   ledger, rejects,  reference tables (replicated to every node): small,
--   quarantine,       and the ledger's primary key stays enforceable.
--   schema_version
SELECT create_distributed_table('{{schema}}.spans', 'trace_id')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.spans'::regclass);
SELECT create_distributed_table('{{schema}}.logs', 'trace_id', colocate_with => '{{schema}}.spans')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.logs'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_gauge', 'metric_name')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_gauge'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_sum', 'metric_name', colocate_with => '{{schema}}.metrics_gauge')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_sum'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_histogram', 'metric_name', colocate_with => '{{schema}}.metrics_gauge')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_histogram'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_exponential_histogram', 'metric_name', colocate_with => '{{schema}}.metrics_gauge')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_exponential_histogram'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_summary', 'metric_name', colocate_with => '{{schema}}.metrics_gauge')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_summary'::regclass);
SELECT create_reference_table('{{schema}}.ledger')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.ledger'::regclass);
SELECT create_reference_table('{{schema}}.rejects')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.rejects'::regclass);
SELECT create_reference_table('{{schema}}.quarantine')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.quarantine'::regclass);
SELECT create_reference_table('{{schema}}.schema_version')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.schema_version'::regclass);
