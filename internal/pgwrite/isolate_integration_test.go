package pgwrite

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// poisonSchema migrates a fresh schema in which rows named "poison" are
// refused with a CHECK violation (23514), the way a data error PostgreSQL
// raises after sanitization would refuse them.
func poisonSchema(t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	ctx := context.Background()
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	conn.Release()
	require.NoError(t, err)
	for table, col := range map[string]string{"spans": "span_name", "logs": "event_name", "metrics_histogram": "metric_name"} {
		_, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{name, tables.StoreName(table)}.Sanitize()+
			" ADD CONSTRAINT no_poison CHECK ("+col+" IS DISTINCT FROM 'poison')")
		require.NoError(t, err)
	}
	return name
}

// spans makes n spans with attribute i = index, named "poison" at bad.
func spans(n int, bad ...int) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "svc")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("scope")
	for i := range n {
		s := ss.Spans().AppendEmpty()
		s.SetName("op")
		if slices.Contains(bad, i) {
			s.SetName("poison")
		}
		s.SetTraceID(pcommon.TraceID{1, byte(i >> 8), byte(i), 15: 1})
		s.SetSpanID(pcommon.SpanID{2, byte(i >> 8), byte(i)})
		s.SetParentSpanID(pcommon.SpanID{3})
		s.SetStartTimestamp(pcommon.Timestamp(1_700_000_000_123_456_789 + i))
		s.SetEndTimestamp(pcommon.Timestamp(1_700_000_001_000_000_000))
		s.SetKind(ptrace.SpanKindServer)
		s.TraceState().FromRaw("k=v")
		s.Status().SetCode(ptrace.StatusCodeError)
		s.Status().SetMessage("boom")
		s.Attributes().PutInt("i", int64(i))
		s.Attributes().PutStr("prompt", strings.Repeat("p", 300+i)) // stored apart
		s.Attributes().PutDouble("nan", math.NaN())
		s.Attributes().PutEmptyBytes("b").FromRaw([]byte{0, 1, 2})
		ev := s.Events().AppendEmpty()
		ev.SetName("ev")
		ev.SetTimestamp(1_700_000_000_500_000_000)
		ev.Attributes().PutBool("x", true)
		l := s.Links().AppendEmpty()
		l.SetTraceID(pcommon.TraceID{9})
		l.SetSpanID(pcommon.SpanID{8})
		s.SetDroppedAttributesCount(math.MaxUint32) // stored bit for bit: -1
	}
	return td
}

func logs(n int, bad ...int) plog.Logs {
	ld := plog.NewLogs()
	sl := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty()
	for i := range n {
		l := sl.LogRecords().AppendEmpty()
		l.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_001 + i))
		l.SetSeverityNumber(plog.SeverityNumberWarn)
		l.SetSeverityText("WARN")
		l.Body().SetEmptyMap().PutStr("msg", "hello")
		l.Attributes().PutInt("i", int64(i))
		l.Attributes().PutStr("stack", strings.Repeat("s", 400)) // stored apart
		if slices.Contains(bad, i) {
			l.SetEventName("poison")
		}
	}
	return ld
}

func histograms(n int, bad ...int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	for i := range n {
		m := sm.Metrics().AppendEmpty()
		m.SetName("latency")
		if slices.Contains(bad, i) {
			m.SetName("poison")
		}
		m.SetUnit("s")
		h := m.SetEmptyHistogram()
		h.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
		dp := h.DataPoints().AppendEmpty()
		dp.SetTimestamp(pcommon.Timestamp(1_700_000_000_000_000_000 + i))
		dp.SetCount(3)
		dp.SetSum(math.Inf(1))
		dp.SetMin(math.NaN())
		dp.BucketCounts().FromRaw([]uint64{1, 2, math.MaxUint64})
		dp.ExplicitBounds().FromRaw([]float64{0.5, math.Inf(-1)})
		dp.Attributes().PutInt("i", int64(i))
	}
	return md
}

// ints reads one integer column of a query.
func ints(t *testing.T, pool *pgxpool.Pool, sql string) []int {
	t.Helper()
	r, err := pool.Query(context.Background(), sql)
	require.NoError(t, err)
	got, err := pgx.CollectRows(r, pgx.RowTo[int])
	require.NoError(t, err)
	slices.Sort(got)
	return got
}

func without(n int, bad ...int) []int {
	var out []int
	for i := range n {
		if !slices.Contains(bad, i) {
			out = append(out, i)
		}
	}
	return out
}

func TestIsolateWritesGoodRowsOnceAndRejectsTheRest(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	q := func(table string) string { return pgx.Identifier{name, table}.Sanitize() }

	// Bad rows first, adjacent, in the middle and last, in three tables.
	badSpans := []int{0, 37, 38, 99}
	var b rows.Batch
	b.AddTraces(spans(100, badSpans...))
	b.AddLogs(logs(10, 5))
	b.AddMetrics(histograms(4, 3))

	var stats IsolationStats
	w := NewWriter(pool, name)
	w.onIsolate = func(s IsolationStats) { stats = s }
	res, err := w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{
		{Table: "spans", Rows: 96, Rejected: 4},
		{Table: "logs", Rows: 9, Rejected: 1},
		{Table: "metrics_histogram", Rows: 3, Rejected: 1},
	}, clearBytes(res))

	// Every good row exactly once, no bad one.
	require.Equal(t, without(100, badSpans...), ints(t, pool, "SELECT (span_attributes->>'i')::int FROM "+q("spans")))
	require.Equal(t, without(10, 5), ints(t, pool, "SELECT (log_attributes->>'i')::int FROM "+q("logs")))
	require.Equal(t, without(4, 3), ints(t, pool, "SELECT (attributes->>'i')::int FROM "+q("metrics_histogram")))

	// Every bad row in rejects, with its reason and the row.
	require.Equal(t, badSpans, ints(t, pool, "SELECT (row_json->'span_attributes'->>'i')::int FROM "+q("rejects")+
		" WHERE signal = 'traces' AND table_name = 'spans' AND sqlstate = '23514' AND error LIKE '%no_poison%'"))
	require.Equal(t, []int{5}, ints(t, pool, "SELECT (row_json->'log_attributes'->>'i')::int FROM "+q("rejects")+
		" WHERE signal = 'logs' AND table_name = 'logs' AND sqlstate = '23514'"))
	require.Equal(t, []int{3}, ints(t, pool, "SELECT (row_json->'attributes'->>'i')::int FROM "+q("rejects")+
		" WHERE signal = 'metrics' AND table_name = 'metrics_histogram' AND sqlstate = '23514'"))
	require.EqualValues(t, 6, pgtest.Count(t, pool, name, "rejects"))

	// b.Rejects, for the exporter's count and log, says the same.
	var got []int
	for _, r := range b.Rejects() {
		require.Equal(t, "23514", pgCode(r.Err))
		got = append(got, r.Table*1000+r.Row)
	}
	slices.Sort(got)
	require.Equal(t, []int{0, 37, 38, 99, 1005, 4003}, got)

	// The tuple column holds each row exactly as sent.
	for _, r := range b.Rejects() {
		var n int
		require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+q("rejects")+" WHERE tuple = $1",
			b.Tuples(r.Table, r.Row, r.Row+1)).Scan(&n))
		require.Equal(t, 1, n)
	}

	// The cost: spans take 5 COPYs (the fast path found row 0: rows 1-99
	// fail at 37; 1-36 pass; 38-99 fail at once; 39-99 fail at 99; 39-98
	// pass), logs 3 (fail at 5; 0-4 and 6-9 pass), the histograms 2 (fail
	// at 3; 0-2 pass), the rejects 1: five refused COPYs for six bad rows.
	require.Equal(t, IsolationStats{Copies: 11, Refused: 5, Rejects: 6}, stats)
}

func clearBytes(res []TableResult) []TableResult {
	for i := range res {
		res[i].Bytes = 0
	}
	return res
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// TestRejectsReplay proves that row_json holds the whole row: once the cause
// is gone, jsonb_populate_record puts back rows identical to a direct write.
func TestRejectsReplay(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	direct := poisonSchema(t, pool)

	fill := func(b *rows.Batch, bad ...int) {
		b.AddTraces(spans(3, bad...))
		b.AddLogs(logs(3, bad...))
		b.AddMetrics(histograms(3, bad...))
	}
	var b rows.Batch
	fill(&b, 0, 1, 2)
	_, err := NewWriter(pool, name).Write(ctx, &b)
	require.NoError(t, err)
	require.Len(t, b.Rejects(), 9)

	for _, table := range []string{"spans", "logs", "metrics_histogram"} {
		for _, s := range []string{name, direct} {
			_, err := pool.Exec(ctx, "ALTER TABLE "+pgx.Identifier{s, tables.StoreName(table)}.Sanitize()+" DROP CONSTRAINT no_poison")
			require.NoError(t, err)
		}
		// Into the stored table: the view of it joins the contexts.
		q := pgx.Identifier{name, tables.StoreName(table)}.Sanitize()
		_, err = pool.Exec(ctx, "INSERT INTO "+q+" SELECT (jsonb_populate_record(NULL::"+q+", row_json)).* FROM "+
			pgx.Identifier{name, "rejects"}.Sanitize()+" WHERE table_name = $1", table)
		require.NoError(t, err)
	}
	var d rows.Batch
	fill(&d, 0, 1, 2)
	_, err = NewWriter(pool, direct).Write(ctx, &d)
	require.NoError(t, err)
	require.Empty(t, d.Rejects())

	for _, table := range []string{"spans", "logs", "metrics_histogram"} {
		// to_jsonb of the whole row compares every column; NaN = NaN in SQL.
		sql := func(s string) string {
			return "SELECT to_jsonb(t)::text FROM " + pgx.Identifier{s, table}.Sanitize() + " t ORDER BY 1"
		}
		var replayed, written []string
		for _, x := range []struct {
			s   string
			out *[]string
		}{{name, &replayed}, {direct, &written}} {
			r, err := pool.Query(ctx, sql(x.s))
			require.NoError(t, err)
			*x.out, err = pgx.CollectRows(r, pgx.RowTo[string])
			require.NoError(t, err)
		}
		require.Len(t, written, 3, table)
		require.Equal(t, written, replayed, table)
	}
}

// TestIsolateByHalvingWithoutLineNumbers covers servers whose messages are
// translated: the same outcome, found by halving.
func TestIsolateByHalvingWithoutLineNumbers(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	useLineNumbers = false
	t.Cleanup(func() { useLineNumbers = true })

	bad := []int{0, 37, 38, 99}
	var b rows.Batch
	b.AddTraces(spans(100, bad...))
	var stats IsolationStats
	w := NewWriter(pool, name)
	w.onIsolate = func(s IsolationStats) { stats = s }
	res, err := w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 96, Rejected: 4}}, clearBytes(res))
	require.Equal(t, without(100, bad...), ints(t, pool, "SELECT (span_attributes->>'i')::int FROM "+pgx.Identifier{name, "spans"}.Sanitize()))
	require.EqualValues(t, 4, pgtest.Count(t, pool, name, "rejects"))
	// Bounded by 2k·log2(n) COPYs plus the rejects.
	require.LessOrEqual(t, stats.Copies, 2*len(bad)*7+1)
	require.Greater(t, stats.Copies, 11, "halving costs more than reading the line")
}

// TestIsolationBudget: a batch where nearly every row is refused costs at most
// isolationBudget refused COPYs; the rows left untried are rejected as not
// isolated rather than retried forever.
func TestIsolationBudget(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	const n = isolationBudget + 110
	bad := make([]int, 0, n)
	for i := 5; i < n-5; i++ {
		bad = append(bad, i)
	}
	var b rows.Batch
	b.AddTraces(spans(n, bad...))
	var stats IsolationStats
	w := NewWriter(pool, name)
	w.onIsolate = func(s IsolationStats) { stats = s }
	res, err := w.Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, isolationBudget, stats.Refused)
	// Rows 0-4 written; 5 (found by the fast path) and the next 1000 refused
	// one by one; the remaining 99 bad and 5 good ones not tried alone.
	require.Equal(t, []TableResult{{Table: "spans", Rows: 5, Rejected: n - 5}}, clearBytes(res))
	var refused, untried int
	for _, r := range b.Rejects() {
		if errors.Is(r.Err, ErrNotIsolated) {
			untried++
		} else {
			refused++
		}
	}
	require.Equal(t, isolationBudget+1, refused)
	require.Equal(t, n-5-isolationBudget-1, untried)
	var stored int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{name, "rejects"}.Sanitize()+
		" WHERE error LIKE 'not isolated:%' AND sqlstate = '23514'").Scan(&stored))
	require.Equal(t, untried, stored)
}

// TestIsolationStopsOnRetryableError: a transient error met while isolating
// fails the whole write, committing nothing, so that it is retried whole.
func TestIsolationStopsOnRetryableError(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	conflictOnSpanName(t, pool, name)

	td := spans(10, 2)
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(7).SetName("conflict")
	var b rows.Batch
	b.AddTraces(td)
	_, err := NewWriter(pool, name).Write(ctx, &b)
	require.Error(t, err)
	require.Equal(t, Retryable, Classify(err))
	require.Equal(t, "40001", pgCode(err))
	require.Empty(t, b.Rejects(), "nothing was committed, so nothing was rejected")
	require.Zero(t, pgtest.Count(t, pool, name, "spans"))
	require.Zero(t, pgtest.Count(t, pool, name, "rejects"))
}

// TestRejectsTableMissing: with create_schema: false and 002 not applied, a
// refused row fails the write loudly, as misconfiguration, with the fix.
func TestRejectsTableMissing(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	_, err := pool.Exec(ctx, "DROP TABLE "+pgx.Identifier{name, "rejects"}.Sanitize())
	require.NoError(t, err)
	var b rows.Batch
	b.AddTraces(spans(3, 1))
	_, err = NewWriter(pool, name).Write(ctx, &b)
	require.Error(t, err)
	require.Equal(t, Config, Classify(err))
	require.Contains(t, err.Error(), "copy into rejects")
	require.Contains(t, Hint(err), "create_schema: true")
	require.Zero(t, pgtest.Count(t, pool, name, "spans"), "the good rows wait with the bad one")
}

// TestRejectsWithoutJSON: when jsonb refuses a row's rendering, the row is
// still kept, as its tuple.
func TestRejectsWithoutJSON(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	s := pgx.Identifier{name}.Sanitize()
	_, err := pool.Exec(ctx, `CREATE FUNCTION `+s+`.nojson() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.row_json IS NOT NULL THEN RAISE EXCEPTION 'simulated' USING ERRCODE = '22P02'; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER nojson BEFORE INSERT ON `+s+`.rejects FOR EACH ROW EXECUTE FUNCTION `+s+`.nojson()`)
	require.NoError(t, err)
	var b rows.Batch
	b.AddTraces(spans(4, 1, 2))
	res, err := NewWriter(pool, name).Write(ctx, &b)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 2, Rejected: 2}}, clearBytes(res))
	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM "+s+".rejects WHERE row_json IS NULL AND length(tuple) > 0").Scan(&n))
	require.Equal(t, 2, n)
}

// TestFastPathUnchanged: without refusals no savepoint or rejects work runs.
func TestFastPathUnchanged(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := poisonSchema(t, pool)
	var b rows.Batch
	b.AddTraces(spans(50))
	w := NewWriter(pool, name)
	w.onIsolate = func(IsolationStats) { t.Fatal("isolation ran on a clean batch") }
	res, err := w.Write(ctx, &b)
	require.NoError(t, err)
	data, err := b.Data(tables.IdxSpans)
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 50, Bytes: len(data)}}, res)
	require.Empty(t, b.Rejects())
	require.EqualValues(t, 50, pgtest.Count(t, pool, name, "spans"))
}

// conflictOnSpanName makes schemaName's spans refuse a span named "conflict"
// with a serialization failure (40001): a retryable error, not a data error.
func conflictOnSpanName(t *testing.T, pool *pgxpool.Pool, schemaName string) {
	t.Helper()
	s := pgx.Identifier{schemaName}.Sanitize()
	_, err := pool.Exec(context.Background(), `CREATE FUNCTION `+s+`.conflict() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.span_name = 'conflict' THEN RAISE EXCEPTION 'simulated' USING ERRCODE = '40001'; END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER conflict BEFORE INSERT ON `+s+`.spans_rows FOR EACH ROW EXECUTE FUNCTION `+s+`.conflict()`)
	require.NoError(t, err)
}
