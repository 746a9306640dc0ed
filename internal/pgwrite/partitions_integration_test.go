package pgwrite

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgcopy"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

func TestPartitionStart(t *testing.T) {
	lo, ok := partitionStart("spans_rows", "spans_p20261202_0600")
	require.True(t, ok)
	require.Equal(t, pgcopy.TimestamptzMicros(time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)), lo)
	for _, name := range []string{"spans_default", "logs_p20261202_0600", "spans_p20261202", "spans_p20261302_0600", "spans_p20261202_0600x"} {
		_, ok := partitionStart("spans_rows", name)
		require.False(t, ok, name)
	}
	parts := []partition{{name: "a", lo: 10}, {name: "b", lo: 20}, {name: "c", lo: 30}}
	for v, want := range map[int64]int{5: -1, 10: 0, 19: 0, 20: 1, 99: 2} {
		require.Equal(t, want, partitionIndex(parts, v), v)
	}
}

// aiCalls makes n model calls starting at the given times, one each, cycling.
func aiCalls(n int, at ...time.Time) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "agent")
	ss := rs.ScopeSpans().AppendEmpty()
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetName("chat")
		s.SetTraceID(pcommon.TraceID{9, byte(i >> 8), byte(i), 15: 1})
		s.SetSpanID(pcommon.SpanID{8, byte(i >> 8), byte(i)})
		start := at[i%len(at)]
		s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
		s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(time.Second)))
		s.SetKind(ptrace.SpanKindClient)
		s.Attributes().PutStr("gen_ai.provider.name", "openai")
		s.Attributes().PutStr("gen_ai.request.model", "gpt-4o")
		s.Attributes().PutInt("gen_ai.usage.input_tokens", 100)
		s.Attributes().PutInt("gen_ai.usage.output_tokens", 10)
	}
	return td
}

// Spans that all fall in one partition are copied into it, and the capture
// trigger counts each call once whichever way its COPY went; a partition
// detached, or whose trigger went, after routing read the catalog is not
// written: its rows go through spans_rows. Both ways write the same rows,
// from a batch and from stream entries.
func TestPartitionRouting(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name, layout := routedSchema(t, pool)
	q := func(table string) string { return pgx.Identifier{name, table}.Sanitize() }
	scalar := func(sql string) int64 {
		var n int64
		require.NoError(t, pool.QueryRow(ctx, sql).Scan(&n), sql)
		return n
	}
	var missing int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND NOT EXISTS (SELECT 1 FROM pg_trigger WHERE tgrelid = c.oid AND tgname = 'postgrescopy_ai_capture')`,
		q("spans_rows")).Scan(&missing))
	require.Zero(t, missing, "maintenance gives every partition the capture trigger")

	hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour) // made ahead: nothing else writes it
	leaf := func(h time.Time) string { return "spans_p" + h.Format("20060102_1504") }
	w := NewLayoutWriter(pool, name, layout)
	write := func(td ptrace.Traces) TableResult {
		t.Helper()
		var b rows.Batch
		b.SetLayout(layout)
		b.AddTraces(td)
		res, err := w.Write(ctx, &b)
		require.NoError(t, err)
		require.Len(t, res, 1)
		return res[0]
	}
	calls := func() int64 { return scalar("SELECT coalesce(sum(calls), 0) FROM " + q("ai_spend_partial")) }

	// One partition's spans go into it; the capture counted them.
	res := write(aiCalls(30, hour.Add(time.Minute), hour.Add(59*time.Minute)))
	require.Equal(t, leaf(hour), res.Partition)
	require.EqualValues(t, 30, res.Rows)
	require.EqualValues(t, 30, calls())
	require.EqualValues(t, 30, scalar("SELECT count(*) FROM "+q(leaf(hour))))

	// Another partition held under an exclusive lock (a VACUUM FULL of an
	// old one) holds up no write into this one, even when routing reads
	// the catalog again.
	other, err := pool.Begin(ctx)
	require.NoError(t, err)
	_, err = other.Exec(ctx, "LOCK TABLE "+q(leaf(hour.Add(-time.Hour)))+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	w.partitions.stale()
	func() {
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		var b rows.Batch
		b.SetLayout(layout)
		b.AddTraces(aiCalls(1, hour.Add(30*time.Minute)))
		res, err := w.Write(wctx, &b)
		require.NoError(t, err, "written while another partition is locked")
		require.Equal(t, leaf(hour), res[0].Partition)
	}()
	require.NoError(t, other.Rollback(ctx))
	_, err = pool.Exec(ctx, "DELETE FROM "+q(leaf(hour))+" WHERE start_time = $1", hour.Add(30*time.Minute))
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "DELETE FROM "+q("ai_spend_partial")+" WHERE max_start = $1", hour.Add(30*time.Minute))
	require.NoError(t, err)
	require.EqualValues(t, 30, calls())

	// Spans over two partitions go into each, one COPY a partition (none
	// through spans_rows, whose trigger's transition table would insert
	// them one at a time), counted once; so do spans over three with
	// rows before the first partition listed, whose rows go through
	// spans_rows.
	var b rows.Batch
	b.SetLayout(layout)
	b.AddTraces(aiCalls(20, hour.Add(-time.Minute), hour.Add(time.Minute)))
	split, err := w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 10, Partition: leaf(hour.Add(-time.Hour))},
		{Table: "spans", Rows: 10, Partition: leaf(hour)}}, clearBytes(split))
	require.EqualValues(t, 50, calls())
	require.EqualValues(t, 40, scalar("SELECT count(*) FROM "+q(leaf(hour))))
	require.EqualValues(t, 10, scalar("SELECT count(*) FROM "+q(leaf(hour.Add(-time.Hour)))))

	// The same from stream entries.
	var s entry.Entries
	s.Reset(layout)
	var eb rows.Batch
	eb.SetLayout(layout)
	eb.AddTraces(aiCalls(15, hour.Add(2*time.Minute)))
	e, err := entry.Append(nil, &eb, true)
	require.NoError(t, err)
	require.NoError(t, s.Add(e))
	eres, err := w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"1-0"}})
	require.NoError(t, err)
	require.Equal(t, leaf(hour), eres[0].Partition)
	require.EqualValues(t, 65, calls())

	// The partition loses its trigger after routing read it: the claim in
	// the write's transaction sees it, and the rows go through spans_rows,
	// captured there.
	_, err = pool.Exec(ctx, "DROP TRIGGER postgrescopy_ai_capture ON "+q(leaf(hour)))
	require.NoError(t, err)
	res = write(aiCalls(10, hour.Add(3*time.Minute)))
	require.Empty(t, res.Partition)
	require.EqualValues(t, 75, calls())
	require.EqualValues(t, 65, scalar("SELECT count(*) FROM "+q(leaf(hour))))

	// Maintenance puts it back; routing reads the catalog again.
	_, err = schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: time.Hour, Premake: 2})
	require.NoError(t, err)
	w.partitions.stale()
	res = write(aiCalls(5, hour.Add(4*time.Minute)))
	require.Equal(t, leaf(hour), res.Partition)
	require.EqualValues(t, 80, calls())

	// Detached (kept as a table) while routing still lists it: not
	// written, the rows land in spans_rows' default partition.
	_, err = pool.Exec(ctx, "ALTER TABLE "+q("spans_rows")+" DETACH PARTITION "+q(leaf(hour)))
	require.NoError(t, err)
	res = write(aiCalls(7, hour.Add(5*time.Minute)))
	require.Empty(t, res.Partition)
	require.EqualValues(t, 70, scalar("SELECT count(*) FROM "+q(leaf(hour))), "nothing more in the detached table")
	require.EqualValues(t, 7, scalar(fmt.Sprintf("SELECT count(*) FROM %s WHERE start_time >= '%s'", q("spans"), hour.Add(5*time.Minute).Format(time.RFC3339))))
	require.EqualValues(t, 87, calls())

	// Spans a month old (no partition of theirs is listed: the default
	// one holds them), of the hour before and of the hour after, from
	// stream entries: the old ones through spans_rows, the others into
	// their partitions.
	s.Reset(layout)
	eb.Reset()
	eb.AddTraces(aiCalls(12, hour.Add(-30*24*time.Hour), hour.Add(-55*time.Minute), hour.Add(65*time.Minute)))
	e, err = entry.Append(nil, &eb, true)
	require.NoError(t, err)
	require.NoError(t, s.Add(e))
	eres, err = w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"2-0"}})
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 4}, {Table: "spans", Rows: 4, Partition: leaf(hour.Add(-time.Hour))},
		{Table: "spans", Rows: 4, Partition: leaf(hour.Add(time.Hour))}}, clearBytes(eres))
	require.EqualValues(t, 99, calls())
	require.EqualValues(t, 14, scalar("SELECT count(*) FROM "+q(leaf(hour.Add(-time.Hour)))))
	require.EqualValues(t, 4, scalar("SELECT count(*) FROM "+q(leaf(hour.Add(time.Hour)))))

	// Spans over more partitions than a write splits into (a backfill)
	// go through spans_rows in one COPY.
	_, err = schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: time.Hour, Premake: maxPieces + 4})
	require.NoError(t, err)
	w.partitions.stale()
	var wide []time.Time
	for h := range maxPieces + 1 {
		wide = append(wide, hour.Add(time.Duration(h+2)*time.Hour+time.Minute))
	}
	b.Reset()
	b.AddTraces(aiCalls(len(wide), wide...))
	split, err = w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: maxPieces + 1}}, clearBytes(split))
	require.EqualValues(t, 99+maxPieces+1, calls())

	// Every call is in the raw call view once, as in the partials.
	require.EqualValues(t, 99+maxPieces+1-70, scalar("SELECT count(*) FROM "+q("gen_ai_calls")), "the raw calls left attached")
}

// A row refused in a batch split by partition is found and rejected alone:
// the refusal's line counts the rows of its partition's COPY, not the
// batch's, so isolation does not take it for the batch's row of that
// number (which would reject a good row and store the bad one's
// neighbours twice over).
func TestPartitionSplitIsolation(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name, layout := routedSchema(t, pool)
	q := func(table string) string { return pgx.Identifier{name, table}.Sanitize() }
	_, err := pool.Exec(ctx, "ALTER TABLE "+q("spans_rows")+" ADD CONSTRAINT no_poison CHECK (span_name IS DISTINCT FROM 'poison')")
	require.NoError(t, err)

	hour := time.Now().UTC().Truncate(time.Hour)
	// Rows alternate: a month old (the default partition, through
	// spans_rows), the hour before, this hour. Rows 6 and 7 are the third
	// of the old ones and of the hour before's: each the third line of its
	// COPY, where the batch's third row is a good one.
	td := aiCalls(12, hour.Add(-30*24*time.Hour), hour.Add(-30*time.Minute), hour.Add(30*time.Minute))
	spans := td.ResourceSpans().At(0).ScopeSpans().At(0).Spans()
	spans.At(7).SetName("poison")
	spans.At(6).SetName("poison")
	w := NewLayoutWriter(pool, name, layout)
	var b rows.Batch
	b.SetLayout(layout)
	b.AddTraces(td)
	res, err := w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 10, Rejected: 2}}, clearBytes(res))
	got := map[string]int{}
	rs, err := pool.Query(ctx, "SELECT span_name, count(*) FROM "+q("spans")+" GROUP BY 1")
	require.NoError(t, err)
	var n int
	var s string
	_, err = pgx.ForEachRow(rs, []any{&s, &n}, func() error { got[s] = n; return nil })
	require.NoError(t, err)
	require.Equal(t, map[string]int{"chat": 10}, got, "every good span once, no poison")
	var rejected int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+q("rejects")+" WHERE row_json->>'span_name' = 'poison'").Scan(&rejected))
	require.Equal(t, 2, rejected)
}
