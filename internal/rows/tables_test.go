package rows_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// TestKindsMatchSchema: each column's Kind is its type in the DDL, so the
// row shrinking and the rejects' JSON read the bytes as what they are.
func TestKindsMatchSchema(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	migrate(t, pool, name)
	udt := map[rows.Kind]string{
		rows.KindTimestamptz: "timestamptz", rows.KindInt16: "int2", rows.KindInt32: "int4",
		rows.KindInt64: "int8", rows.KindFloat64: "float8", rows.KindBool: "bool", rows.KindUUID: "uuid",
		rows.KindText: "text", rows.KindJSONB: "jsonb", rows.KindInt64Array: "_int8", rows.KindFloat64Array: "_float8",
	}
	for _, tb := range rows.Tables {
		require.Len(t, tb.Kinds, len(tb.Columns), tb.Name)
		require.Contains(t, []string{"traces", "logs", "metrics"}, tb.Signal)
		for j, col := range tb.Columns {
			var got string
			err := pool.QueryRow(context.Background(), `SELECT udt_name FROM information_schema.columns
WHERE table_schema = $1 AND table_name = $2 AND column_name = $3`, name, tb.Name, col).Scan(&got)
			require.NoError(t, err, "%s.%s", tb.Name, col)
			require.Equal(t, udt[tb.Kinds[j]], got, "%s.%s", tb.Name, col)
		}
	}
}
