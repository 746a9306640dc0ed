package pgwrite

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestCitusIntegration isolates refused rows on a real Citus cluster when
// POSTGRESCOPY_CITUS_URL names its coordinator, and says what it cost.
func TestCitusIntegration(t *testing.T) {
	url := pgtest.CitusURL(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams[schema.CitusModifyMode] = "sequential" // as the exporter sets it
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "pgct_citus_" + hex.EncodeToString(b[:])
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	})
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.Distribute(ctx, conn.Conn(), name))
	conn.Release()
	_, err = pool.Exec(ctx, "ALTER TABLE "+schema.Qualified(name, "spans_rows")+" ADD CONSTRAINT no_poison CHECK (span_name IS DISTINCT FROM 'poison')")
	require.NoError(t, err)

	layout := tables.DefaultLayout().WithShardKey()
	w := NewLayoutWriter(pool, name, layout)

	t.Run("refused_rows_are_isolated_with_their_reason", func(t *testing.T) {
		var bad []int
		for i := 4; i < 495; i += 9 {
			bad = append(bad, i)
		}
		require.Len(t, bad, 55)
		var stats IsolationStats
		w.onIsolate = func(s IsolationStats) { stats = s }
		var batch rows.Batch
		batch.SetLayout(layout)
		batch.AddTraces(spans(500, bad...))
		begin := time.Now()
		res, err := w.WriteLedgered(ctx, &batch, &Ledger{Stream: "s", IDs: []string{"a"}})
		took := time.Since(begin)
		require.NoError(t, err)
		t.Logf("500 rows, 55 refused: %v, %d COPYs (%d into the check table), %d refused", took, stats.Copies, stats.Checked, stats.Refused)
		assert.Equal(t, []TableResult{{Table: "spans", Rows: 445, Bytes: res[0].Bytes, Rejected: 55}}, res)
		assert.Equal(t, 2, stats.Copies-stats.Checked, "one COPY into the distributed table, one into rejects")
		for _, r := range batch.Rejects() {
			assert.Contains(t, bad, r.Row)
			code, msg, _ := describe(r.Err)
			assert.Equal(t, "23514", code, msg)
		}
	})

	t.Run("shard_only_refusals_are_halved_within_the_time_bound", func(t *testing.T) {
		// A CHECK on one partition only: the coordinator's check (LIKE the
		// parent) accepts the rows, the workers refuse 5 of them.
		_, err := pool.Exec(ctx, "ALTER TABLE "+schema.Qualified(name, "spans_default")+" ADD CONSTRAINT no_poison2 CHECK (span_name IS DISTINCT FROM 'poison2')")
		require.NoError(t, err)
		renamed := func(bad ...int) *rows.Batch {
			td := spans(500, bad...)
			for _, sp := range td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().All() {
				if sp.Name() == "poison" {
					sp.SetName("poison2")
				}
			}
			b := new(rows.Batch)
			b.SetLayout(layout)
			b.AddTraces(td)
			return b
		}
		var stats IsolationStats
		w.onIsolate = func(s IsolationStats) { stats = s }
		batch := renamed(10, 100, 250, 251, 499)
		begin := time.Now()
		res, err := w.Write(ctx, batch)
		require.NoError(t, err)
		t.Logf("500 rows, 5 refused by the shards alone: %v, %d COPYs (%d into the check table), %d refused",
			time.Since(begin), stats.Copies, stats.Checked, stats.Refused)
		assert.Equal(t, 495, res[0].Rows)
		assert.Equal(t, 5, res[0].Rejected)

		// Under a short deadline, isolation stops at half of it: the rows not
		// tried alone are kept in rejects, and the write commits.
		var bad []int
		for i := 0; i < 500; i += 10 {
			bad = append(bad, i)
		}
		batch = renamed(bad...)
		short, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
		defer cancel()
		begin = time.Now()
		res, err = w.Write(short, batch)
		took := time.Since(begin)
		require.NoError(t, err, "a batch that cannot be isolated in time is kept, not retried")
		t.Logf("500 rows, 50 refused by the shards, 1.5 s deadline: %v, %d written, %d rejected", took, res[0].Rows, res[0].Rejected)
		assert.Less(t, took, 1500*time.Millisecond)
		assert.Equal(t, 500, res[0].Rows+res[0].Rejected)
		notIsolated := 0
		for _, r := range batch.Rejects() {
			if errors.Is(r.Err, ErrNotIsolated) {
				notIsolated++
			}
		}
		assert.Positive(t, notIsolated, "rows not tried alone in time are marked so")
	})

	t.Run("retried_batch_is_recognised", func(t *testing.T) {
		var empty rows.Batch
		empty.SetLayout(layout)
		_, err := w.WriteLedgered(ctx, &empty, &Ledger{Stream: "s", IDs: []string{"again"}})
		require.NoError(t, err)
		_, err = w.WriteLedgered(ctx, &empty, &Ledger{Stream: "s", IDs: []string{"again"}})
		assert.ErrorIs(t, err, ErrAlreadyCommitted)
	})
}
