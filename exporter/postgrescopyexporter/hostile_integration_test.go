package postgrescopyexporter

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// hostileDir holds the corpus: OTLP JSON requests whose items each carry
// test.id and test.expect (see its README.md).
var hostileDir = filepath.Join("..", "..", "testdata", "hostile")

// poisonColumns: rows whose column is 'poison' are refused by a CHECK
// constraint (SQLSTATE 23514), standing in for whatever PostgreSQL may still
// refuse after sanitization, so that isolation is exercised on demand.
var poisonColumns = map[string]string{
	"spans": "span_name", "logs": "event_name",
	"metrics_gauge": "metric_name", "metrics_sum": "metric_name", "metrics_histogram": "metric_name",
	"metrics_exponential_histogram": "metric_name", "metrics_summary": "metric_name",
}

// attrColumn is where each table keeps the item's attributes (test.id).
func attrColumn(table string) string {
	switch table {
	case "spans":
		return "span_attributes"
	case "logs":
		return "log_attributes"
	}
	return "attributes"
}

// hostileCase is one item of the corpus.
type hostileCase struct {
	id, table string
	rejected  bool
	expect    []expectation
}

// expectation: the SQL expression, evaluated on the item's row (or on its
// rejects row), must give want as text; nil means NULL.
type expectation struct {
	expr string
	want *string
}

func show(s *string) string {
	if s == nil {
		return "<NULL>"
	}
	return fmt.Sprintf("%q", *s)
}

func readCase(t *testing.T, attrs pcommon.Map, table string) hostileCase {
	id, ok := attrs.Get("test.id")
	require.True(t, ok, "every corpus item has test.id")
	c := hostileCase{id: id.Str(), table: table}
	exp, ok := attrs.Get("test.expect")
	require.True(t, ok, "%s has test.expect", c.id)
	for k, v := range exp.Map().All() {
		if k == "outcome" {
			c.rejected = v.Str() == "rejected"
			continue
		}
		e := expectation{expr: k}
		if v.Type() != pcommon.ValueTypeEmpty {
			s := v.Str()
			e.want = &s
		}
		c.expect = append(c.expect, e)
	}
	return c
}

// hostileRequest is one hostile file mixed with good items.
type hostileRequest struct {
	cases []hostileCase
	good  map[string][]string // table -> ids
	send  func(context.Context) error
}

func readFile(t *testing.T, name string) []byte {
	b, err := os.ReadFile(filepath.Join(hostileDir, name))
	require.NoError(t, err)
	return b
}

// goodSpan and the others make the good items that surround every hostile one.
func goodSpan(s ptrace.Span, id string) {
	s.SetName("good")
	s.SetTraceID(pcommon.TraceID{1, 2, 3})
	s.SetSpanID(pcommon.SpanID{4, 5, 6})
	s.SetStartTimestamp(1_700_000_000_000_000_000)
	s.SetEndTimestamp(1_700_000_000_500_000_000)
	s.Attributes().PutStr("test.id", id)
}

func tracesRequest(t *testing.T, te interface {
	ConsumeTraces(context.Context, ptrace.Traces) error
}) hostileRequest {
	in, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(readFile(t, "traces.json"))
	require.NoError(t, err)
	r := hostileRequest{good: map[string][]string{}}
	out := ptrace.NewTraces()
	good := func(spans ptrace.SpanSlice) {
		id := fmt.Sprintf("good/traces/%d", len(r.good["spans"]))
		goodSpan(spans.AppendEmpty(), id)
		r.good["spans"] = append(r.good["spans"], id)
	}
	good(out.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans())
	for _, rs := range in.ResourceSpans().All() {
		ors := out.ResourceSpans().AppendEmpty()
		rs.Resource().CopyTo(ors.Resource())
		ors.SetSchemaUrl(rs.SchemaUrl())
		for _, ss := range rs.ScopeSpans().All() {
			oss := ors.ScopeSpans().AppendEmpty()
			ss.Scope().CopyTo(oss.Scope())
			for _, s := range ss.Spans().All() {
				good(oss.Spans())
				s.CopyTo(oss.Spans().AppendEmpty())
				r.cases = append(r.cases, readCase(t, s.Attributes(), "spans"))
			}
			good(oss.Spans())
		}
	}
	good(out.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans())
	r.send = func(ctx context.Context) error { return te.ConsumeTraces(ctx, out) }
	return r
}

func logsRequest(t *testing.T, le interface {
	ConsumeLogs(context.Context, plog.Logs) error
}) hostileRequest {
	in, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs(readFile(t, "logs.json"))
	require.NoError(t, err)
	r := hostileRequest{good: map[string][]string{}}
	out := plog.NewLogs()
	good := func(recs plog.LogRecordSlice) {
		id := fmt.Sprintf("good/logs/%d", len(r.good["logs"]))
		l := recs.AppendEmpty()
		l.SetTimestamp(1_700_000_000_000_000_000)
		l.Body().SetStr("good")
		l.Attributes().PutStr("test.id", id)
		r.good["logs"] = append(r.good["logs"], id)
	}
	for _, rl := range in.ResourceLogs().All() {
		orl := out.ResourceLogs().AppendEmpty()
		rl.Resource().CopyTo(orl.Resource())
		for _, sl := range rl.ScopeLogs().All() {
			osl := orl.ScopeLogs().AppendEmpty()
			sl.Scope().CopyTo(osl.Scope())
			for _, l := range sl.LogRecords().All() {
				good(osl.LogRecords())
				l.CopyTo(osl.LogRecords().AppendEmpty())
				r.cases = append(r.cases, readCase(t, l.Attributes(), "logs"))
			}
			good(osl.LogRecords())
		}
	}
	r.send = func(ctx context.Context) error { return le.ConsumeLogs(ctx, out) }
	return r
}

var metricTables = map[pmetric.MetricType]string{
	pmetric.MetricTypeGauge: "metrics_gauge", pmetric.MetricTypeSum: "metrics_sum",
	pmetric.MetricTypeHistogram: "metrics_histogram", pmetric.MetricTypeExponentialHistogram: "metrics_exponential_histogram",
	pmetric.MetricTypeSummary: "metrics_summary",
}

// pointAttributes returns the attributes of a metric's only data point.
func pointAttributes(m pmetric.Metric) pcommon.Map {
	switch m.Type() {
	case pmetric.MetricTypeGauge:
		return m.Gauge().DataPoints().At(0).Attributes()
	case pmetric.MetricTypeSum:
		return m.Sum().DataPoints().At(0).Attributes()
	case pmetric.MetricTypeHistogram:
		return m.Histogram().DataPoints().At(0).Attributes()
	case pmetric.MetricTypeExponentialHistogram:
		return m.ExponentialHistogram().DataPoints().At(0).Attributes()
	default:
		return m.Summary().DataPoints().At(0).Attributes()
	}
}

func metricsRequest(t *testing.T, me interface {
	ConsumeMetrics(context.Context, pmetric.Metrics) error
}) hostileRequest {
	in, err := (&pmetric.JSONUnmarshaler{}).UnmarshalMetrics(readFile(t, "metrics.json"))
	require.NoError(t, err)
	r := hostileRequest{good: map[string][]string{}}
	out := pmetric.NewMetrics()
	// A good point of the same type goes before each hostile one, so that
	// every metric table has good rows around its bad ones.
	good := func(ms pmetric.MetricSlice, like pmetric.Metric) {
		table := metricTables[like.Type()]
		id := fmt.Sprintf("good/%s/%d", table, len(r.good[table]))
		m := ms.AppendEmpty()
		like.CopyTo(m)
		m.SetName("good")
		attrs := pointAttributes(m)
		attrs.Clear()
		attrs.PutStr("test.id", id)
		r.good[table] = append(r.good[table], id)
	}
	for _, rm := range in.ResourceMetrics().All() {
		orm := out.ResourceMetrics().AppendEmpty()
		rm.Resource().CopyTo(orm.Resource())
		for _, sm := range rm.ScopeMetrics().All() {
			osm := orm.ScopeMetrics().AppendEmpty()
			sm.Scope().CopyTo(osm.Scope())
			for _, m := range sm.Metrics().All() {
				good(osm.Metrics(), m)
				m.CopyTo(osm.Metrics().AppendEmpty())
				r.cases = append(r.cases, readCase(t, pointAttributes(m), metricTables[m.Type()]))
			}
		}
	}
	r.send = func(ctx context.Context) error { return me.ConsumeMetrics(ctx, out) }
	return r
}

// utcPool reads timestamptz as text in UTC, as the expectations spell it.
func utcPool(t *testing.T) *pgxpool.Pool {
	pc, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	pc.ConnConfig.RuntimeParams["timezone"] = "UTC"
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// TestHostileCorpus sends each hostile file, mixed with good items, through
// the exporter with limits small enough for the corpus to reach them, and
// checks every item: good ones land exactly once, hostile ones are stored as
// docs/sanitization.md says or are in the rejects table with their reason,
// the rejects are counted and logged once per batch, and the exporter keeps
// working.
func TestHostileCorpus(t *testing.T) {
	ctx := context.Background()
	cfg, schemaName := testConfig(t)
	cfg.Limits = LimitsConfig{MaxValueBytes: 1024, MaxRowBytes: 4096}
	require.NoError(t, cfg.Limits.Validate())

	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(ctx)) })
	core, logs := observer.New(zapcore.InfoLevel)
	set := exportertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = zap.New(core)
	f := NewFactory()
	te, err := f.CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	me, err := f.CreateMetrics(ctx, set, cfg)
	require.NoError(t, err)
	le, err := f.CreateLogs(ctx, set, cfg)
	require.NoError(t, err)
	host := componenttest.NewNopHost()
	for _, e := range []interface {
		Start(context.Context, component.Host) error
		Shutdown(context.Context) error
	}{te, me, le} {
		require.NoError(t, e.Start(ctx, host))
		t.Cleanup(func() { require.NoError(t, e.Shutdown(ctx)) })
	}

	pool := utcPool(t)
	q := func(table string) string { return pgx.Identifier{schemaName, table}.Sanitize() }
	for table, col := range poisonColumns {
		_, err := pool.Exec(ctx, "ALTER TABLE "+q(tables.StoreName(table))+" ADD CONSTRAINT no_poison CHECK ("+col+" IS DISTINCT FROM 'poison')")
		require.NoError(t, err)
	}

	requests := []hostileRequest{tracesRequest(t, te), logsRequest(t, le), metricsRequest(t, me)}
	stored, rejected := map[string]int{}, map[string]int{}
	for _, r := range requests {
		require.NoError(t, r.send(ctx), "a hostile request is accepted whole")
		for _, c := range r.cases {
			if c.rejected {
				rejected[c.table]++
			} else {
				stored[c.table]++
			}
		}
	}
	require.NotEmpty(t, rejected["spans"])
	require.NotEmpty(t, rejected["logs"])
	require.Len(t, rejected, len(poisonColumns), "the corpus refuses a row in every table")

	count := func(sql string, args ...any) int {
		var n int
		require.NoError(t, pool.QueryRow(ctx, sql, args...).Scan(&n), sql)
		return n
	}
	inTable := func(table, id string) int {
		return count("SELECT count(*) FROM "+q(table)+" WHERE "+attrColumn(table)+"->>'test.id' = $1", id)
	}
	inRejects := func(table, id string) int {
		return count("SELECT count(*) FROM "+q("rejects")+" WHERE table_name = $1 AND row_json->'"+attrColumn(table)+"'->>'test.id' = $2", table, id)
	}

	var cases int
	for _, r := range requests {
		for table, ids := range r.good {
			for _, id := range ids {
				assert.Equal(t, 1, inTable(table, id), "good item %s lands exactly once", id)
				assert.Zero(t, inRejects(table, id), "good item %s is not rejected", id)
			}
		}
		for _, c := range r.cases {
			cases++
			t.Run(c.id, func(t *testing.T) {
				from := q(c.table) + " WHERE " + attrColumn(c.table) + "->>'test.id' = $1"
				if c.rejected {
					require.Zero(t, inTable(c.table, c.id), "refused, so not in %s", c.table)
					require.Equal(t, 1, inRejects(c.table, c.id), "in rejects exactly once")
					from = q("rejects") + " WHERE row_json->'" + attrColumn(c.table) + "'->>'test.id' = $1"
				} else {
					require.Equal(t, 1, inTable(c.table, c.id), "stored exactly once")
					require.Zero(t, inRejects(c.table, c.id))
				}
				for _, e := range c.expect {
					var got *string
					require.NoError(t, pool.QueryRow(ctx, "SELECT ("+e.expr+")::text FROM "+from, c.id).Scan(&got), e.expr)
					assert.Equal(t, show(e.want), show(got), "%s", e.expr)
				}
			})
		}
	}
	require.Greater(t, cases, 40)

	// Counted: nothing else in the tables, every refusal in rejects and in
	// the exporter's metric, by table.
	m, err := tel.GetMetric("otelcol_postgrescopy_rejected_rows")
	require.NoError(t, err)
	counted := map[string]int{}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		table, _ := dp.Attributes.Value("table")
		counted[table.AsString()] += int(dp.Value)
	}
	assert.Equal(t, rejected, counted)
	total := 0
	for table := range poisonColumns {
		good := 0
		for _, r := range requests {
			good += len(r.good[table])
		}
		assert.Equal(t, good+stored[table], count("SELECT count(*) FROM "+q(table)), table)
		assert.Equal(t, rejected[table], count("SELECT count(*) FROM "+q("rejects")+" WHERE table_name = $1", table), table)
		total += rejected[table]
	}
	assert.Equal(t, total, count("SELECT count(*) FROM "+q("rejects")))

	// Logged once per batch, not per row: one line per request.
	lines := logs.FilterMessageSnippet("refused rows of a batch").All()
	require.Len(t, lines, len(requests))
	for i, l := range lines {
		n := 0
		for _, c := range requests[i].cases {
			if c.rejected {
				n++
			}
		}
		assert.EqualValues(t, n, l.ContextMap()["rejected"])
		assert.Contains(t, fmt.Sprint(l.ContextMap()["first_reason"]), "no_poison")
	}

	// Still healthy: a plain request goes through.
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(5, "after")))
	assert.Equal(t, 5, count("SELECT count(*) FROM "+q("spans")+" WHERE service_name = 'after'"))
}

// TestHostileCorpusIsReadable guards the corpus's conventions: valid OTLP
// JSON (with raw invalid UTF-8 only where a case asks for it), and ids that
// are unique and name their signal.
func TestHostileCorpusIsReadable(t *testing.T) {
	seen := map[string]bool{}
	for _, name := range []string{"traces.json", "logs.json", "metrics.json"} {
		raw := readFile(t, name)
		var v any
		require.NoError(t, json.Unmarshal(raw, &v), "%s is JSON", name)
		signal := strings.TrimSuffix(name, ".json")
		var ids []string
		switch signal {
		case "traces":
			td, err := (&ptrace.JSONUnmarshaler{}).UnmarshalTraces(raw)
			require.NoError(t, err)
			for _, rs := range td.ResourceSpans().All() {
				for _, ss := range rs.ScopeSpans().All() {
					for _, s := range ss.Spans().All() {
						ids = append(ids, readCase(t, s.Attributes(), "spans").id)
					}
				}
			}
		case "logs":
			ld, err := (&plog.JSONUnmarshaler{}).UnmarshalLogs(raw)
			require.NoError(t, err)
			for _, rl := range ld.ResourceLogs().All() {
				for _, sl := range rl.ScopeLogs().All() {
					for _, l := range sl.LogRecords().All() {
						ids = append(ids, readCase(t, l.Attributes(), "logs").id)
					}
				}
			}
		case "metrics":
			md, err := (&pmetric.JSONUnmarshaler{}).UnmarshalMetrics(raw)
			require.NoError(t, err)
			for _, rm := range md.ResourceMetrics().All() {
				for _, sm := range rm.ScopeMetrics().All() {
					for _, m := range sm.Metrics().All() {
						ids = append(ids, readCase(t, pointAttributes(m), metricTables[m.Type()]).id)
					}
				}
			}
		}
		require.NotEmpty(t, ids)
		for _, id := range ids {
			require.True(t, strings.HasPrefix(id, signal+"/"), id)
			require.False(t, seen[id], "duplicate id %s", id)
			seen[id] = true
		}
	}
}
