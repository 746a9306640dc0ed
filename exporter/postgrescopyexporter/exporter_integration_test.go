package postgrescopyexporter

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// testConfig is a direct-write config (no queue, so pushes are synchronous)
// into a fresh schema of the test server.
func testConfig(t *testing.T) (*Config, string) {
	pool := pgtest.Pool(t)
	schemaName := pgtest.Schema(t, pool)
	cfg := defaultConfig()
	cfg.Endpoint = configopaque.String(pgtest.URL())
	cfg.Schema = schemaName
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	cfg.RetryConfig.Enabled = false
	return cfg, schemaName
}

func makeTraces(spans int, service string) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	ss := rs.ScopeSpans().AppendEmpty()
	for i := 0; i < spans; i++ {
		s := ss.Spans().AppendEmpty()
		s.SetName("op")
		s.SetTraceID(pcommon.TraceID{1, byte(i >> 8), byte(i)})
		s.SetSpanID(pcommon.SpanID{2, byte(i >> 8), byte(i)})
		s.SetStartTimestamp(1_700_000_000_123_456_789)
		s.SetEndTimestamp(1_700_000_001_000_000_000)
		s.Attributes().PutInt("i", int64(i))
	}
	return td
}

func TestExporterWritesAllSignalsSharingOnePool(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	f := NewFactory()
	set, logs := observedSettings()

	te, err := f.CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	me, err := f.CreateMetrics(ctx, set, cfg)
	require.NoError(t, err)
	le, err := f.CreateLogs(ctx, set, cfg)
	require.NoError(t, err)
	host := componenttest.NewNopHost()
	require.NoError(t, te.Start(ctx, host))
	require.NoError(t, me.Start(ctx, host))
	require.NoError(t, le.Start(ctx, host))

	require.Equal(t, 1, clients.Len(), "the three signals must share one client")

	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, te.ConsumeTraces(ctx, makeTraces(250, fmt.Sprintf("svc-%d", g))))
		}()
	}
	wg.Wait()

	md := pmetric.NewMetrics()
	sm := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty()
	g := sm.Metrics().AppendEmpty()
	g.SetName("g")
	g.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(1.5)
	require.NoError(t, me.ConsumeMetrics(ctx, md))

	ld := plog.NewLogs()
	ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetStr("hello")
	require.NoError(t, le.ConsumeLogs(ctx, ld))

	require.NoError(t, te.Shutdown(ctx))
	require.NoError(t, me.Shutdown(ctx))
	require.NoError(t, le.Shutdown(ctx))
	require.NoError(t, le.Shutdown(ctx), "shutdown twice is safe")

	pool := pgtest.Pool(t)
	require.EqualValues(t, 1000, pgtest.Count(t, pool, schemaName, "spans"))
	require.EqualValues(t, 1, pgtest.Count(t, pool, schemaName, "metrics_gauge"))
	require.EqualValues(t, 1, pgtest.Count(t, pool, schemaName, "logs"))

	// Each commit's debug line names its tables, whichever signal's
	// settings the shared client was built with.
	written := map[string]int{}
	for _, e := range logs.FilterMessage("batch written").All() {
		tables, _ := e.ContextMap()["tables"].([]any)
		require.Len(t, tables, 1, "one signal per push: %v", e.ContextMap())
		written[tables[0].(string)]++
	}
	require.Equal(t, map[string]int{"spans": 4, "metrics_gauge": 1, "logs": 1}, written)

	require.Zero(t, clients.Len(), "the shared client is released after the last shutdown")
}

// Spans of now are copied straight into today's partition of spans_rows
// (pgwrite's routing, schema 8), and the commit's debug line names it;
// spans of another time go through spans_rows and name none.
func TestSpansCopiedIntoTheirPartition(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	set, logs := observedSettings()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	require.NoError(t, te.ConsumeTraces(ctx, uniqueTraces(1, 5)))
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(3, "old")))
	require.NoError(t, te.Shutdown(ctx))

	pool := pgtest.Pool(t)
	require.EqualValues(t, 8, pgtest.Count(t, pool, schemaName, "spans"))
	var today string
	require.NoError(t, pool.QueryRow(ctx, "SELECT DISTINCT c.relname FROM "+pgx.Identifier{schemaName, "spans_rows"}.Sanitize()+
		" r JOIN pg_class c ON c.oid = r.tableoid WHERE r.service_name = 'redis-test'").Scan(&today))
	require.Regexp(t, `^spans_p\d{8}_0000$`, today, "the spans of now are in a day's partition")
	require.EqualValues(t, 5, pgtest.Count(t, pool, schemaName, today))
	var parts []any
	for _, e := range logs.FilterMessage("batch written").All() {
		if p, ok := e.ContextMap()["partitions"].([]any); ok {
			parts = append(parts, p...)
		}
	}
	require.Equal(t, []any{today}, parts, "the batch of now names its partition, the other none")
}
