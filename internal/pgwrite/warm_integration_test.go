package pgwrite

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestWarm: warming a connection copies no rows into every stored table
// and into each one's partition of now, in a transaction rolled back that
// leaves nothing behind, and prepares the flush statements: the first
// write on the connection then sends no prepare of its own. A connection
// warmed once is not warmed again.
func TestWarm(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.Pool(t)
	name, layout := routedSchema(t, admin)

	pool, proxy := countedPool(t)
	w := NewLayoutWriter(pool, name, layout)

	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	proxy.Reset()
	now := time.Now().UTC()
	require.NoError(t, w.Warm(ctx, conn.Conn()))
	require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus(), "idle after the warm-up")
	txs := proxy.Transactions()
	require.Len(t, txs, 1)
	warm := txs[0]
	for i := range 7 {
		store := layout.Table(i).Store
		require.True(t, warm.Has("COPY \""+name+"\".\""+store+"\" ("), "%s: %q", store, warm.Statements)
	}
	current := "spans_p" + now.Truncate(time.Hour).Format("20060102_1504")
	if now.Add(time.Second).Truncate(time.Hour).Equal(now.Truncate(time.Hour)) {
		require.True(t, warm.Has("COPY \""+name+"\".\""+current+"\" ("), "the partition of now, %s: %q", current, warm.Statements)
	}
	require.True(t, warm.Has("ROLLBACK"), "%q", warm.Statements)
	for _, table := range []string{"spans", "logs", "metrics_gauge", "ledger"} {
		require.Zero(t, pgtest.Count(t, admin, name, table), table)
	}
	var partials int64
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+name+".ai_spend_partial").Scan(&partials))
	require.Zero(t, partials)

	proxy.Reset()
	require.NoError(t, w.Warm(ctx, conn.Conn()))
	require.Zero(t, proxy.RoundTrips(), "warmed once")
	conn.Release()

	// The first write: its new contexts, then the transaction, nothing
	// prepared first.
	hour := now.Truncate(time.Hour).Add(time.Hour)
	w.partitions.refresh(ctx, pool)
	proxy.Reset()
	var b rows.Batch
	b.SetLayout(layout)
	b.AddTraces(aiCalls(3, hour.Add(time.Minute)))
	_, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"1-0"}})
	require.NoError(t, err)
	require.Equal(t, 3, proxy.RoundTrips(), "the contexts, then the transaction's two")
	require.EqualValues(t, 3, pgtest.Count(t, admin, name, "spans"))
}

// TestWarmDoesNotWaitForALock: a table held locked (an ALTER, a VACUUM
// FULL) makes the warm-up give up at once rather than hold up a start; the
// connection is left idle and unwarmed, and a later Warm tries again.
func TestWarmDoesNotWaitForALock(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.Pool(t)
	name, layout := routedSchema(t, admin)
	lock, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = lock.Rollback(ctx) }()
	_, err = lock.Exec(ctx, "LOCK TABLE "+pgx.Identifier{name, "logs_rows"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	pool, _ := countedPool(t)
	w := NewLayoutWriter(pool, name, layout)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	began := time.Now()
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	err = w.Warm(wctx, conn.Conn())
	require.Error(t, err, "a table locked")
	require.Less(t, time.Since(began), 5*time.Second, "gave up instead of waiting")
	require.Equal(t, byte('I'), conn.Conn().PgConn().TxStatus())

	require.NoError(t, lock.Rollback(ctx))
	require.NoError(t, w.Warm(ctx, conn.Conn()), "warmed once the lock is gone")
}
