package schema_test

import (
	"context"
	"os"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

var distributeRe = regexp.MustCompile(`SELECT (create_distributed_table|create_reference_table)\('"otel"\.(\w+)'(?:, '(\w+)')?(?:, colocate_with => '"otel"\.(\w+)')?\)\nWHERE NOT EXISTS \(SELECT 1 FROM pg_dist_partition WHERE logicalrelid = '"otel"\.(\w+)'::regclass\);`)

func TestCitusDDL(t *testing.T) {
	ddl := schema.CitusDDL("otel")
	type dist struct{ fn, column, colocate string }
	got := map[string]dist{}
	for _, m := range distributeRe.FindAllStringSubmatch(ddl, -1) {
		require.Equal(t, m[2], m[5], "the guard checks the table it distributes")
		got[m[2]] = dist{m[1], m[3], m[4]}
	}
	// Every signal table is distributed, spans and logs by trace_id together,
	// the metric tables by metric_name together.
	for _, tbl := range tables.Tables[:tables.NumSignalTables] {
		d, ok := got[tbl.Store]
		require.True(t, ok, "%s is distributed", tbl.Store)
		assert.Equal(t, "create_distributed_table", d.fn, tbl.Name)
		assert.Contains(t, tbl.Columns, d.column, "%s is distributed by one of its columns", tbl.Name)
	}
	assert.Equal(t, dist{"create_distributed_table", "trace_id", ""}, got["spans_rows"])
	assert.Equal(t, dist{"create_distributed_table", "trace_id", "spans_rows"}, got["logs_rows"])
	assert.Equal(t, dist{"create_distributed_table", "metric_name", ""}, got["metrics_gauge_rows"])
	for _, m := range []string{"metrics_sum", "metrics_histogram", "metrics_exponential_histogram", "metrics_summary"} {
		assert.Equal(t, dist{"create_distributed_table", "metric_name", "metrics_gauge_rows"}, got[m+"_rows"])
	}
	for _, ref := range []string{"ledger", "rejects", "quarantine", "schema_version", "contexts"} {
		assert.Equal(t, "create_reference_table", got[ref].fn, ref)
	}
	assert.Len(t, got, tables.NumSignalTables+5, "nothing else is distributed")
}

// TestCitusIndexesKeepNoUniqueness: Citus refuses unique indexes that do not
// include the distribution column; the query index set has none.
func TestCitusIndexesKeepNoUniqueness(t *testing.T) {
	for _, name := range schema.IndexNames() {
		assert.NotContains(t, name, "unique")
	}
	assert.NotRegexp(t, `(?i)create unique`, schema.CitusDDL("otel"))
}

// TestCitusIntegration runs against a real Citus coordinator when one is named.
func TestCitusIntegration(t *testing.T) {
	url := os.Getenv("POSTGRESCOPY_CITUS_URL")
	if url == "" {
		t.Skip("POSTGRESCOPY_CITUS_URL is not set: no Citus coordinator here (Citus is not packaged in Debian 12); set it to a coordinator URL to run this test")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(ctx)
	name := "pgct_citus"
	t.Cleanup(func() { _, _ = conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS pgct_citus CASCADE") })
	_, err = schema.Migrate(ctx, conn, name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn, name, true))
	require.NoError(t, schema.Distribute(ctx, conn, name))
	require.NoError(t, schema.Distribute(ctx, conn, name), "idempotent")
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_dist_partition p JOIN pg_class c ON c.oid = p.logicalrelid
JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = $1 AND c.relname = ANY($2)`, name,
		[]string{"spans_rows", "logs_rows", "metrics_gauge_rows", "ledger", "contexts"}).Scan(&n))
	assert.Equal(t, 5, n)
	_, err = schema.Maintain(ctx, conn, name, daily)
	require.NoError(t, err, "partition maintenance works on distributed tables")
}
