package pgwrite

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// legacyRows holds rows of the previous release's layout (format copy1):
// every signal row ends with its context's eight columns, and there is no
// dictionary.
type legacyRows struct {
	lay *tables.Layout
	enc [tables.NumTables]pgcopy.Encoder
}

func (l *legacyRows) Layout() *tables.Layout        { return l.lay }
func (l *legacyRows) Encoder(i int) *pgcopy.Encoder { return &l.enc[i] }

// legacyDescriptor is the built-in layout's descriptor as the previous
// release wrote it: seven tables, the context columns in each.
func legacyDescriptor() []byte {
	str := func(d []byte, s string) []byte { return append(binary.AppendUvarint(d, uint64(len(s))), s...) }
	ctxKinds := tables.Tables[tables.IdxContexts].Kinds[1:]
	var d []byte
	for i := range tables.NumSignalTables {
		t := tables.Tables[i]
		cols := tables.LegacyColumns(i)
		kinds := append(slices.DeleteFunc(slices.Clone(t.Kinds[:len(t.Kinds)-1]), func(k tables.Kind) bool {
			return k == tables.KindTextArray // no long strings' column then
		}), ctxKinds...)
		d = str(d, t.Name)
		d = binary.AppendUvarint(d, uint64(len(cols)))
		for j, c := range cols {
			d = append(str(d, c), byte(kinds[j]))
		}
	}
	return d
}

// toLegacy rewrites b's rows (built-in layout) as the previous release
// encoded them: each context_id replaced by its context's fields.
func toLegacy(t *testing.T, b *rows.Batch) *legacyRows {
	t.Helper()
	lay, err := tables.ParseLayout(legacyDescriptor())
	require.NoError(t, err)
	require.Empty(t, lay.Table(tables.IdxContexts).Columns, "a copy1 layout has no dictionary")
	ctxs := map[string][][]byte{}
	for k := range b.Rows(tables.IdxContexts) {
		f, ok := pgcopy.SplitRow(nil, b.Tuples(tables.IdxContexts, k, k+1))
		require.True(t, ok)
		ctxs[string(f[0])] = f[1:]
	}
	l := &legacyRows{lay: lay}
	for i := range tables.NumSignalTables {
		for k := range b.Rows(i) {
			f, ok := pgcopy.SplitRow(nil, b.Tuples(i, k, k+1))
			require.True(t, ok)
			c, ok := ctxs[string(f[len(f)-1])]
			require.True(t, ok, "the row's context is in its batch")
			var vals [][]byte
			for j, v := range f[:len(f)-1] {
				if tables.Tables[i].Kinds[j] == tables.KindTextArray {
					// The previous release had no long strings' column: they
					// were in the jsonb before it.
					if v != nil {
						vals[len(vals)-1] = mergeLong(t, vals[len(vals)-1], v)
					}
					continue
				}
				vals = append(vals, v)
			}
			vals = append(vals, c...)
			e := &l.enc[i]
			e.BeginRow(len(vals))
			for _, v := range vals {
				e.Fields(pgcopy.AppendField(nil, v), 1)
			}
		}
	}
	return l
}

// mergeLong puts a long strings' text[] back into the binary jsonb doc
// before it (its attribute map), as releases before schema 9 stored them.
func mergeLong(t *testing.T, doc, long []byte) []byte {
	t.Helper()
	pairs, ok := pgcopy.TextArrayValues(long)
	require.True(t, ok)
	dec := json.NewDecoder(bytes.NewReader(doc[1:]))
	dec.UseNumber()
	var m map[string]any
	require.NoError(t, dec.Decode(&m))
	for k := 0; k < len(pairs); k += 2 {
		m[pairs[k]] = pairs[k+1]
	}
	out, err := json.Marshal(m)
	require.NoError(t, err)
	return append([]byte{1}, out...)
}

// sameRows says whether table reads the same rows (every column, as text) in
// schemas a and b.
func sameRows(t *testing.T, ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, a, b, table string) bool {
	t.Helper()
	var same bool
	require.NoError(t, q.QueryRow(ctx, "SELECT (SELECT array_agg(t::text ORDER BY t::text) FROM "+pgx.Identifier{a, table}.Sanitize()+" t) = "+
		"(SELECT array_agg(t::text ORDER BY t::text) FROM "+pgx.Identifier{b, table}.Sanitize()+" t)").Scan(&same))
	return same
}

// TestPreviousReleaseEntriesWriteTheSameRows: an entry the previous release
// wrote (copy1: the context in every row, no dictionary), still pending in
// Redis at the upgrade, is written as it is, through its own layout's COPY,
// and its rows read back through the views exactly as the same rows written
// by this release do, context and all.
func TestPreviousReleaseEntriesWriteTheSameRows(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	var b rows.Batch
	b.AddTraces(spans(40))
	b.AddLogs(logs(7))
	b.AddMetrics(histograms(3))
	nctx := b.Rows(tables.IdxContexts)
	require.Positive(t, nctx)

	legacy := toLegacy(t, &b)
	old, err := entry.Append(nil, legacy, true)
	require.NoError(t, err)
	oldLayout, err := tables.ParseLayout(legacyDescriptor())
	require.NoError(t, err)
	var s entry.Entries
	s.Reset(oldLayout)
	require.NoError(t, s.Add(old))
	oldSchema := poisonSchema(t, pool)
	_, err = NewLayoutWriter(pool, oldSchema, oldLayout).WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"old"}})
	require.NoError(t, err)

	newSchema := poisonSchema(t, pool)
	_, err = NewWriter(pool, newSchema).Write(ctx, &b)
	require.NoError(t, err)

	require.EqualValues(t, 0, pgtest.Count(t, pool, oldSchema, "contexts"), "old rows carry their context")
	require.EqualValues(t, nctx, pgtest.Count(t, pool, newSchema, "contexts"))
	for _, table := range []string{"spans", "logs", "metrics_histogram"} {
		require.True(t, sameRows(t, ctx, pool, oldSchema, newSchema, table), "%s reads the same rows both ways", table)
	}
	var withRes int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{oldSchema, "spans"}.Sanitize()+
		" WHERE resource_attributes ->> 'service.name' = 'svc' AND scope_name = 'scope'").Scan(&withRes))
	require.EqualValues(t, 40, withRes, "the view reads an old row's own context")
}

// TestContextsRememberedOnlyOnceCommitted: a context is inserted once,
// committed before the rows that reference it: a write whose rows roll back
// keeps it, the next batches do not insert it again, and no committed row
// lacks its context.
func TestContextsRememberedOnlyOnceCommitted(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	conflictOnSpanName(t, pool, name)
	w := NewWriter(pool, name)

	td := spans(5)
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(3).SetName("conflict")
	var b rows.Batch
	b.AddTraces(td)
	_, err := w.Write(ctx, &b)
	require.Error(t, err)
	require.Equal(t, Retryable, Classify(err))
	require.EqualValues(t, 1, pgtest.Count(t, pool, name, "contexts"), "committed before the rows")
	require.EqualValues(t, 0, pgtest.Count(t, pool, name, "spans"), "the rows rolled back")

	for range 2 {
		b.Reset()
		b.AddTraces(spans(5))
		_, err = w.Write(ctx, &b)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, pgtest.Count(t, pool, name, "contexts"), "one row per context")
	var missing int64
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name, "spans"}.Sanitize()+" WHERE resource_attributes IS NULL OR scope_attributes IS NULL").Scan(&missing))
	require.EqualValues(t, 0, missing, "every committed row has its context")
	require.EqualValues(t, 10, pgtest.Count(t, pool, name, "spans"))

	// Another writer of the process (another layout's) shares what is known;
	// a fresh one inserts again, which the dictionary ignores.
	fresh := NewWriter(pool, name)
	b.Reset()
	b.AddTraces(spans(2))
	_, err = fresh.Write(ctx, &b)
	require.NoError(t, err)
	require.EqualValues(t, 1, pgtest.Count(t, pool, name, "contexts"))
}
