package postgrescopyexporter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// heartbeat is a log record without timestamps: valid OTLP, and the same
// bytes every time it is sent.
func heartbeat() plog.Logs {
	ld := plog.NewLogs()
	lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.Body().SetStr("heartbeat")
	return ld
}

func TestIdenticalRequestsAreDistinctEvents(t *testing.T) {
	for _, queue := range []bool{false, true} {
		name := map[bool]string{false: "no_queue", true: "queue_and_batch"}[queue]
		t.Run(name, func(t *testing.T) {
			cfg, schemaName := testConfig(t)
			if queue {
				// The batcher merges the five into one write of five parts.
				cfg.QueueConfig = metadata.NewDefaultSendingQueueConfig()
			}
			ctx := context.Background()
			le, err := NewFactory().CreateLogs(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
			require.NoError(t, err)
			require.NoError(t, le.Start(ctx, componenttest.NewNopHost()))
			for range 5 {
				require.NoError(t, le.ConsumeLogs(ctx, heartbeat()))
			}
			require.NoError(t, le.Shutdown(ctx)) // drains the queue
			pool := pgtest.Pool(t)
			require.EqualValues(t, 5, pgtest.Count(t, pool, schemaName, "logs"),
				"five requests with the same bytes are five events")
			require.EqualValues(t, 5, pgtest.Count(t, pool, schemaName, "ledger"))
		})
	}
}

// TestDirectRetryIsNotDuplicated: the retry sender pushes the same request
// again after a commit whose answer was lost; its key is in the ledger.
func TestDirectRetryIsNotDuplicated(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	set, logs := observedSettings()
	e, err := newExporter(cfg, set)
	require.NoError(t, err)
	require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, e.shutdown(ctx)) })
	push := pusher(e, request.Traces)

	req := request.New(request.Traces, makeTraces(40, "retry"))
	require.NoError(t, push(ctx, req))
	require.NoError(t, push(ctx, req))
	pool := pgtest.Pool(t)
	require.EqualValues(t, 40, pgtest.Count(t, pool, schemaName, "spans"))
	require.Equal(t, 1, logs.FilterMessage("parts already committed; not writing them again").Len())

	// A committed part replayed next to new ones (a persistent queue after
	// a restart, merged with other neighbours): only the new ones are written.
	other := request.New(request.Traces, makeTraces(7, "other"))
	merged, err := request.New(request.Traces, makeTraces(40, "retry")).MergeSplit(ctx, 0, exporterhelper.RequestSizerTypeItems, other)
	require.NoError(t, err)
	merged[0].(*request.Request[ptrace.Traces]).Parts()[0].Key = req.Parts()[0].Key
	require.NoError(t, push(ctx, merged[0]))
	require.EqualValues(t, 47, pgtest.Count(t, pool, schemaName, "spans"))
	require.EqualValues(t, 2, pgtest.Count(t, pool, schemaName, "ledger"))
}

// TestRedisMergedRequestIsOneEntryPerPart: with a sending queue in front of
// Redis, the batcher merges requests; each keeps its own entry (and key).
func TestRedisMergedRequestIsOneEntryPerPart(t *testing.T) {
	cfg, schemaName := testConfig(t)
	_, prefix := testRedis(t)
	cfg = withRedis(cfg, prefix, "merge")
	q := metadata.NewDefaultSendingQueueConfig()
	q.Get().WaitForResult = true
	q.Get().Batch.Get().FlushTimeout = 500 * time.Millisecond
	cfg.QueueConfig = q
	require.NoError(t, cfg.Validate())
	te, tel := startTraces(t, cfg)

	const requests, spans = 5, 10
	var wg sync.WaitGroup
	for i := range requests {
		wg.Go(func() { require.NoError(t, te.ConsumeTraces(context.Background(), uniqueTraces(i, spans))) })
	}
	wg.Wait()

	m, err := tel.GetMetric("otelcol_exporter_queue_batch_send_size")
	require.NoError(t, err)
	var batches uint64
	for _, dp := range m.Data.(metricdata.Histogram[int64]).DataPoints {
		batches += dp.Count
	}
	require.Less(t, batches, uint64(requests), "the batcher merged requests")
	require.EqualValues(t, requests, counterSum(t, tel, "otelcol_postgrescopy_redis_entries_added"))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return pgtest.Count(t, pool, schemaName, "spans") == requests*spans },
		20*time.Second, 50*time.Millisecond)
}

// pushTwice pushes one request twice, as the retry sender does after a
// commit whose answer was lost.
func pushTwice(t *testing.T, cfg *Config, td ptrace.Traces) {
	ctx := context.Background()
	e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
	require.NoError(t, err)
	require.NoError(t, e.start(ctx, componenttest.NewNopHost()))
	defer func() { require.NoError(t, e.shutdown(ctx)) }()
	req := request.New(request.Traces, td)
	push := pusher(e, request.Traces)
	require.NoError(t, push(ctx, req))
	require.NoError(t, push(ctx, req))
}
