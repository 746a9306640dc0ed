package pgsink

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestSkippedPartitionWarnsOnce: a partition maintenance cannot make (a
// partition of another interval overlaps it) is logged at Warn with the
// reason, once, not at every run; a partition skipped for a new reason
// is told again.
func TestSkippedPartitionWarnsOnce(t *testing.T) {
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	conn.Release()
	require.NoError(t, err)

	today := time.Now().UTC().Truncate(24 * time.Hour)
	day := func(n int) time.Time { return today.Add(time.Duration(n) * 24 * time.Hour) }
	partition := func(n int) string { return "spans_p" + day(n).Format("20060102") + "_0000" }
	overlap := func(table string, n int) {
		t.Helper()
		_, err := pool.Exec(ctx, "CREATE TABLE "+schema.Qualified(name, table)+" PARTITION OF "+schema.Qualified(name, "spans_rows")+
			" FOR VALUES FROM ('"+day(n).Format(time.RFC3339)+"') TO ('"+day(n).Add(time.Hour).Format(time.RFC3339)+"')")
		require.NoError(t, err)
	}
	// An hourly partition of day 2, made by hand: the daily one cannot be.
	overlap("spans_hourly_a", 2)

	pc, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	pc.MaxConns = 2
	core, logs := observer.New(zapcore.DebugLevel)
	s := New(Config{Pool: pc, Schema: name, CreateSchema: true, Layout: tables.DefaultLayout(),
		LedgerRetention: time.Hour, Partitioning: schema.Partitioning{Interval: 24 * time.Hour, Premake: 3},
		MaintenanceInterval: time.Hour}, zap.New(core), nopRecorder{})
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { s.Stop(); s.Wait(); s.Close() })
	require.True(t, s.Ready())

	warned := func() []observer.LoggedEntry {
		return logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("partition").AllUntimed()
	}
	w := warned()
	require.Len(t, w, 1, "the start's maintenance warns of the partition it could not make: %v", logs.AllUntimed())
	fields := w[0].ContextMap()
	assert.Equal(t, partition(2), fields["partition"])
	assert.Contains(t, fields["reason"], `would overlap partition "spans_hourly_a"`)

	// The next runs skip it again, silently.
	s.maintainPartitions(ctx)
	s.maintainPartitions(ctx)
	assert.Len(t, warned(), 1, "told once, not at every run")

	// Once the overlap is gone the partition is made (at Info), and a new
	// partition that cannot be made is told.
	_, err = pool.Exec(ctx, "DROP TABLE "+schema.Qualified(name, "spans_hourly_a"))
	require.NoError(t, err)
	s.maintainPartitions(ctx)
	created := logs.FilterLevelExact(zapcore.InfoLevel).FilterMessage("partition created").FilterField(zap.String("partition", partition(2)))
	assert.Equal(t, 1, created.Len())
	assert.Len(t, warned(), 1)

	_, err = pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{name, partition(3)}.Sanitize())
	require.NoError(t, err)
	overlap("spans_hourly_b", 3)
	s.maintainPartitions(ctx)
	s.maintainPartitions(ctx)
	w = warned()
	require.Len(t, w, 2)
	assert.Equal(t, partition(3), w[1].ContextMap()["partition"])
}
