-- Citus (distribution: citus): run on the coordinator after the migrations.
-- Each statement is skipped when its table is already distributed, so this
-- is safe to run at every start. The tables keep their time partitioning;
-- Citus distributes every partition with its parent.
--
--   spans, logs       (their stored tables, spans_rows and logs_rows, under
--                     the views) hash-distributed by trace_id and colocated, so a trace's
--                     spans and logs live on one node and the trace lookup,
--                     the parent/child join and span-log joins stay local.
--   metrics_*         hash-distributed by metric_name and colocated with each
--                     other: a series (name + attributes) is always on one
--                     node, so time aggregations per series stay local.
--   ledger, rejects,  reference tables (replicated to every node): small,
--   quarantine,       and the ledger's primary key stays enforceable; the
--   schema_version,   context dictionary is joined to every row by the
--   contexts          views, on the node that holds the row.
SELECT create_distributed_table('{{schema}}.spans_rows', 'trace_id')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.spans_rows'::regclass);
SELECT create_distributed_table('{{schema}}.logs_rows', 'trace_id', colocate_with => '{{schema}}.spans_rows')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.logs_rows'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_gauge_rows', 'metric_name')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_gauge_rows'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_sum_rows', 'metric_name', colocate_with => '{{schema}}.metrics_gauge_rows')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_sum_rows'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_histogram_rows', 'metric_name', colocate_with => '{{schema}}.metrics_gauge_rows')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_histogram_rows'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_exponential_histogram_rows', 'metric_name', colocate_with => '{{schema}}.metrics_gauge_rows')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_exponential_histogram_rows'::regclass);
SELECT create_distributed_table('{{schema}}.metrics_summary_rows', 'metric_name', colocate_with => '{{schema}}.metrics_gauge_rows')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.metrics_summary_rows'::regclass);
SELECT create_reference_table('{{schema}}.ledger')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.ledger'::regclass);
SELECT create_reference_table('{{schema}}.rejects')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.rejects'::regclass);
SELECT create_reference_table('{{schema}}.quarantine')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.quarantine'::regclass);
SELECT create_reference_table('{{schema}}.schema_version')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.schema_version'::regclass);
SELECT create_reference_table('{{schema}}.contexts')
WHERE NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '{{schema}}.contexts'::regclass);
