package tables_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestKindsMatchSchema: each column's Kind is its type in the DDL, so the
// row shrinking and the rejects' JSON read the bytes as what they are.
func TestKindsMatchSchema(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(context.Background())
	require.NoError(t, err)
	_, err = schema.Migrate(context.Background(), conn.Conn(), name)
	conn.Release()
	require.NoError(t, err)
	udt := map[tables.Kind]string{
		tables.KindTimestamptz: "timestamptz", tables.KindInt16: "int2", tables.KindInt32: "int4",
		tables.KindInt64: "int8", tables.KindFloat64: "float8", tables.KindBool: "bool", tables.KindUUID: "uuid",
		tables.KindText: "text", tables.KindJSONB: "jsonb", tables.KindInt64Array: "_int8", tables.KindFloat64Array: "_float8",
		tables.KindTextArray: "_text",
	}
	for _, tb := range tables.Tables {
		require.Len(t, tb.Kinds, len(tb.Columns), tb.Name)
		require.Contains(t, []string{"traces", "logs", "metrics", ""}, tb.Signal)
		for j, col := range tb.Columns {
			var got string
			err := pool.QueryRow(context.Background(), `SELECT udt_name FROM information_schema.columns
WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`, name, tb.Store, col).Scan(&got)
			require.NoError(t, err, "%s.%s", tb.Store, col)
			require.Equal(t, udt[tb.Kinds[j]], got, "%s.%s", tb.Store, col)
		}
	}
}
