package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// exporterPartitioning is the exporter's default partition layout
// (partitioning: interval 24h, premake 3, no retention).
var exporterPartitioning = schema.Partitioning{Interval: 24 * time.Hour, Premake: 3}

// benchLayout is the exporter's default row layout: the built-in columns and
// the genai preset's promoted columns (promote_preset: genai).
var benchLayout = func() *tables.Layout {
	l, err := tables.NewLayout(tables.GenAI())
	if err != nil {
		panic(err) // the preset is fixed at build time
	}
	return l
}()

// prepareSchema does what the exporter does at start with its defaults
// (create_schema: true, indexes: true, promote_preset: genai): migrate, add
// the promoted columns, create the query index set, and make the partitions
// around now, so that every strategy writes into the same layout the
// collector writes into.
func prepareSchema(ctx context.Context, conn *pgx.Conn, name string) error {
	if _, err := schema.Migrate(ctx, conn, name); err != nil {
		return fmt.Errorf("migrate %s: %w", name, err)
	}
	if err := schema.AddColumns(ctx, conn, name, schema.PromotedColumns(benchLayout)); err != nil {
		return fmt.Errorf("promoted columns of %s: %w", name, err)
	}
	if err := schema.SetIndexes(ctx, conn, name, true); err != nil {
		return fmt.Errorf("indexes of %s: %w", name, err)
	}
	if _, err := schema.Maintain(ctx, conn, name, exporterPartitioning); err != nil {
		return fmt.Errorf("partitions of %s: %w", name, err)
	}
	return nil
}

// newSchema creates (or recreates) the bench schema prefix_suffix as the
// exporter would, and remembers it for cleanup.
func (b *bench) newSchema(ctx context.Context, suffix string) (string, error) {
	name := b.prefix + "_" + suffix
	if _, err := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE"); err != nil {
		return "", fmt.Errorf("drop schema %s: %w", name, err)
	}
	conn, err := b.pool.Acquire(ctx)
	if err != nil {
		return "", err
	}
	defer conn.Release()
	b.schemas = append(b.schemas, name)
	return name, prepareSchema(ctx, conn.Conn(), name)
}

// dropSchemas removes every schema this run created.
func (b *bench) dropSchemas() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, s := range b.schemas {
		if _, err := b.pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{s}.Sanitize()+" CASCADE"); err != nil {
			b.logf("cleanup: drop schema %s: %v", s, err)
		}
	}
	b.schemas = nil
}

// reset empties every table of the schema (the ledger too, so a direct
// write's batch hash from an earlier run cannot look like a retry) and
// checkpoints, so that each timed run starts from the same state and does
// not pay for the previous run's dirty buffers. The schema's own rows stay:
// its version, and the AI spend settings row (made once, by the migration;
// without it the ai_spend view has no bounds and every AI query fails),
// whose rollup state goes back to a new schema's.
func (b *bench) reset(ctx context.Context, name string) error {
	r, err := b.pool.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = $1
		AND tablename NOT IN ('schema_version', 'ai_spend_settings')`, name)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(r, pgx.RowTo[string])
	if err != nil {
		return err
	}
	quoted := make([]string, len(tables))
	for i, t := range tables {
		quoted[i] = schema.Qualified(name, t)
	}
	if _, err := b.pool.Exec(ctx, "TRUNCATE "+strings.Join(quoted, ", ")); err != nil {
		return fmt.Errorf("truncate %s: %w", name, err)
	}
	if slices.Contains(tables, "ai_spend_hourly") {
		if _, err := b.pool.Exec(ctx, "UPDATE "+schema.Qualified(name, "ai_spend_settings")+" SET rolled_to = NULL, live_from = NULL"); err != nil {
			return fmt.Errorf("reset the AI spend rollup of %s: %w", name, err)
		}
	}
	if _, err := b.pool.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// countRows counts the rows of every workload table in name.
func countRows(ctx context.Context, pool *pgxpool.Pool, name string) (int64, error) {
	parts := make([]string, numTables)
	for i, t := range tables.Tables {
		parts[i] = "(SELECT count(*) FROM " + schema.Qualified(name, t.Store) + ")"
	}
	var n int64
	err := pool.QueryRow(ctx, "SELECT "+strings.Join(parts, " + ")).Scan(&n)
	return n, err
}

// countSignalRows counts the rows of the signal tables in name, without the
// context dictionary: what a collector run is expected to write.
func countSignalRows(ctx context.Context, pool *pgxpool.Pool, name string) (int64, error) {
	parts := make([]string, tables.NumSignalTables)
	for i, t := range tables.Tables[:tables.NumSignalTables] {
		parts[i] = "(SELECT count(*) FROM " + schema.Qualified(name, t.Store) + ")"
	}
	var n int64
	err := pool.QueryRow(ctx, "SELECT "+strings.Join(parts, " + ")).Scan(&n)
	return n, err
}

// setUnlogged turns the workload tables of name into UNLOGGED tables: no WAL,
// the reference for what durability costs. The tables are partitioned, and
// PostgreSQL 15 silently ignores SET UNLOGGED on a partitioned parent, so
// every existing partition is switched instead.
func (b *bench) setUnlogged(ctx context.Context, name string) error {
	for _, t := range tables.Tables {
		r, err := b.pool.Query(ctx, `SELECT relid::regclass::text FROM pg_partition_tree($1::regclass) WHERE isleaf`,
			schema.Qualified(name, t.Store))
		if err != nil {
			return fmt.Errorf("partitions of %s: %w", t.Name, err)
		}
		leaves, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("partitions of %s: %w", t.Name, err)
		}
		for _, leaf := range leaves {
			if _, err := b.pool.Exec(ctx, "ALTER TABLE "+leaf+" SET UNLOGGED"); err != nil {
				return fmt.Errorf("set %s unlogged: %w", leaf, err)
			}
		}
	}
	return nil
}

// index is one of the schema's secondary indexes on a workload table.
type index struct{ name, def string }

// workloadIndexes lists the indexes of the workload tables in name that do
// not back a constraint (the ledger's and schema_version's keys stay). On
// partitioned tables these are the parents' indexes; dropping one drops it
// on every partition.
func (b *bench) workloadIndexes(ctx context.Context, name string) ([]index, error) {
	names := make([]string, numTables)
	for i, t := range tables.Tables {
		names[i] = t.Store
	}
	r, err := b.pool.Query(ctx, `
SELECT i.indexname, i.indexdef
FROM pg_indexes i
WHERE i.schemaname = $1 AND i.tablename = ANY($2)
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c
                  WHERE c.conindid = (quote_ident(i.schemaname) || '.' || quote_ident(i.indexname))::regclass)
ORDER BY i.indexname`, name, names)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(r, func(row pgx.CollectableRow) (index, error) {
		var ix index
		err := row.Scan(&ix.name, &ix.def)
		return ix, err
	})
}

func (b *bench) dropIndexes(ctx context.Context, name string, ixs []index) error {
	for _, ix := range ixs {
		if _, err := b.pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{name, ix.name}.Sanitize()); err != nil {
			return fmt.Errorf("drop index %s: %w", ix.name, err)
		}
	}
	return nil
}

func (b *bench) createIndexes(ctx context.Context, ixs []index) error {
	for _, ix := range ixs {
		// pg_indexes shows a partitioned index as "ON ONLY parent", which
		// would create it without its partitions' indexes.
		def := strings.Replace(ix.def, " ON ONLY ", " ON ", 1)
		if _, err := b.pool.Exec(ctx, def); err != nil {
			return fmt.Errorf("create index %s: %w", ix.name, err)
		}
	}
	return nil
}

func (b *bench) analyze(ctx context.Context, name string) error {
	for _, t := range tables.Tables {
		if _, err := b.pool.Exec(ctx, "ANALYZE "+schema.Qualified(name, t.Store)); err != nil {
			return err
		}
	}
	return nil
}
