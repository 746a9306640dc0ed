package pgwrite

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// entry encodes one request's rows as a compressed stream entry.
func ent(t *testing.T, add func(*rows.Batch)) []byte {
	t.Helper()
	var b rows.Batch
	add(&b)
	e, err := entry.Append(nil, &b, true)
	require.NoError(t, err)
	return e
}

// WriteEntries writes what Write writes for the same entries, byte for byte
// in the tables, with their ledger ids; an id already in the ledger commits
// nothing; a damaged entry and a refused row each roll everything back, with
// an error that says which (entry.ErrMalformed, Classify Data).
func TestWriteEntries(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	q := func(table string) string { return pgx.Identifier{name, table}.Sanitize() }
	w := NewWriter(pool, name)
	w.onIsolate = func(IsolationStats) { t.Fatal("WriteEntries never isolates") }
	count := func(table string) int64 { return pgtest.Count(t, pool, name, table) }

	e1 := ent(t, func(b *rows.Batch) { b.AddTraces(spans(40)); b.AddLogs(logs(7)) })
	e2 := ent(t, func(b *rows.Batch) { b.AddTraces(spans(25)); b.AddMetrics(histograms(3)) })
	var s entry.Entries
	s.Reset(tables.DefaultLayout())
	require.NoError(t, s.Add(e1))
	require.NoError(t, s.Add(e2))
	res, err := w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"e1", "e2"}})
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 65}, {Table: "logs", Rows: 7}, {Table: "metrics_histogram", Rows: 3}},
		clearBytes(append([]TableResult(nil), res...)))

	// The same rows through a Batch, in another schema, read back equal.
	other := poisonSchema(t, pool)
	var b rows.Batch
	require.NoError(t, entry.AddTo(&b, e1))
	require.NoError(t, entry.AddTo(&b, e2))
	want, err := NewWriter(pool, other).Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, want, res, "rows and bytes per table")
	for _, table := range []string{"spans", "logs", "metrics_histogram"} {
		var same bool
		require.NoError(t, pool.QueryRow(ctx, "SELECT (SELECT array_agg(t::text ORDER BY t::text) FROM "+q(table)+" t) = "+
			"(SELECT array_agg(t::text ORDER BY t::text) FROM "+pgx.Identifier{other, table}.Sanitize()+" t)").Scan(&same))
		require.True(t, same, "%s holds the same rows both ways", table)
	}

	// A ledger id already committed: nothing more is written.
	s.Reset(tables.DefaultLayout())
	require.NoError(t, s.Add(e1))
	_, err = w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"e1"}})
	require.ErrorIs(t, err, ErrAlreadyCommitted)
	require.EqualValues(t, 65, count("spans"))

	// A damaged second entry (a flipped byte at the end of its compressed
	// spans, its only table) is found while the COPY streams: the first
	// entry's rows are rolled back.
	bad := ent(t, func(b *rows.Batch) { b.AddTraces(spans(25)) })
	bad[len(bad)-3] ^= 0x55
	s.Reset(tables.DefaultLayout())
	require.NoError(t, s.Add(ent(t, func(b *rows.Batch) { b.AddTraces(spans(10)) })))
	require.NoError(t, s.Add(bad), "the headers are intact")
	_, err = w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"x1", "x2"}})
	require.ErrorIs(t, err, entry.ErrMalformed)
	require.EqualValues(t, 65, count("spans"))
	require.EqualValues(t, 0, pgtest.Count(t, pool, name, "ledger")-2, "only e1 and e2 are in the ledger")

	// The same with another table after the spans, in the same message: the
	// spans' COPY fails, the logs' is not run.
	s.Reset(tables.DefaultLayout())
	require.NoError(t, s.Add(ent(t, func(b *rows.Batch) { b.AddTraces(spans(10)); b.AddLogs(logs(3)) })))
	require.NoError(t, s.Add(bad))
	_, err = w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"y1", "y2"}})
	require.ErrorIs(t, err, entry.ErrMalformed)
	require.EqualValues(t, 65, count("spans"))
	require.EqualValues(t, 7, count("logs"))
	require.EqualValues(t, 0, pgtest.Count(t, pool, name, "ledger")-2, "only e1 and e2 are in the ledger")

	// A row PostgreSQL refuses: Data, nothing committed, no rejects.
	s.Reset(tables.DefaultLayout())
	require.NoError(t, s.Add(ent(t, func(b *rows.Batch) { b.AddLogs(logs(5, 2)) })))
	_, err = w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"p1"}})
	require.Error(t, err)
	require.Equal(t, Data, Classify(err))
	require.EqualValues(t, 7, count("logs"))
	require.EqualValues(t, 0, count("rejects"))
}
