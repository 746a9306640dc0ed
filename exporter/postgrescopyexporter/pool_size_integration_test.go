package postgrescopyexporter

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestSmallPoolStartsWritesAndStops: max_conns accepts every size from 1 (a
// small pool is what PgBouncer or a low connection limit asks for), so every
// stage that uses a connection — schema preparation, partition maintenance,
// the price loader and its watcher, the flush workers of each signal, the
// rejects written by isolation, the ledger — must work with only one, never
// holding one while waiting for another.
func TestSmallPoolStartsWritesAndStops(t *testing.T) {
	for _, mode := range []string{"direct", "queue", "redis"} {
		for _, conns := range []int32{1, 2} {
			t.Run(fmt.Sprintf("%s/max_conns=%d", mode, conns), func(t *testing.T) {
				smallPool(t, mode, conns)
			})
		}
	}
}

// smallPoolBound is how long starting, writing and shutting down may each
// take; a connection held while another is awaited shows as startAttempt
// (10 s) or more.
const smallPoolBound = 5 * time.Second

// smallPool runs one case: mode "direct" writes each push synchronously,
// "queue" through the default sending queue (two consumers per signal),
// "redis" through the streams.
func smallPool(t *testing.T, mode string, conns int32) {
	cfg, schemaName := testConfig(t)
	cfg.MaxConns = conns
	file := filepath.Join(t.TempDir(), "prices.yaml")
	prices := strings.ReplaceAll(testPrices, "{{noon}}", time.Now().UTC().Format(time.RFC3339))
	require.NoError(t, os.WriteFile(file, []byte(prices), 0o600))
	cfg.Pricing.File = file
	cfg.Pricing.ReloadInterval = time.Second // the watcher competes with the writes
	switch mode {
	case "queue":
		cfg.QueueConfig = defaultConfig().QueueConfig
	case "redis":
		_, prefix := testRedis(t)
		withRedis(cfg, prefix, "small-pool")
		cfg.Redis.Get().Workers = 2 // six flush workers for one or two connections
	}
	require.NoError(t, cfg.Validate())

	set := exportertest.NewNopSettings(metadata.Type)
	f := NewFactory()
	te, err := f.CreateTraces(context.Background(), set, cfg)
	require.NoError(t, err)
	me, err := f.CreateMetrics(context.Background(), set, cfg)
	require.NoError(t, err)
	le, err := f.CreateLogs(context.Background(), set, cfg)
	require.NoError(t, err)
	comps := []component.Component{te, me, le}
	t.Cleanup(func() { // after a failure; safe after Shutdown
		for _, c := range comps {
			_ = c.Shutdown(context.Background())
		}
	})

	begin := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), smallPoolBound)
	for _, c := range comps {
		require.NoError(t, c.Start(ctx, componenttest.NewNopHost()))
	}
	cancel()
	require.Less(t, time.Since(begin), smallPoolBound, "start with max_conns: %d", conns)

	pool := pgtest.Pool(t)
	_, err = pool.Exec(context.Background(), "ALTER TABLE "+schema.Qualified(schemaName, "spans_rows")+
		" ADD CONSTRAINT no_poison CHECK (span_name <> 'poison')")
	require.NoError(t, err)

	// Two senders per signal, three requests each, all at once; one traces
	// request carries rows PostgreSQL refuses, isolated into rejects.
	const senders, requests, perRequest = 2, 3, 50
	begin = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), smallPoolBound)
	defer cancel()
	var wg sync.WaitGroup
	errs := make(chan error, 3*senders*requests+1)
	for s := range senders {
		wg.Add(3)
		go func() {
			defer wg.Done()
			for r := range requests {
				errs <- te.ConsumeTraces(ctx, uniqueTraces(s*requests+r, perRequest))
			}
		}()
		go func() {
			defer wg.Done()
			for range requests {
				errs <- me.ConsumeMetrics(ctx, gauges(perRequest))
			}
		}()
		go func() {
			defer wg.Done()
			for range requests {
				errs <- le.ConsumeLogs(ctx, records(perRequest))
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		errs <- te.ConsumeTraces(ctx, poisonSpans(100, every9th))
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err, "write with max_conns: %d", conns)
	}

	const want = senders * requests * perRequest
	// The queue and Redis acknowledged before PostgreSQL had the rows: wait
	// for their consumers.
	q := func(table string) string {
		return "(SELECT count(*) FROM " + schema.Qualified(schemaName, table) + ")"
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var spans, points, logs, rejects int
		err := pool.QueryRow(context.Background(), "SELECT "+q("spans")+", "+q("metrics_gauge")+", "+q("logs")+", "+q(pgwrite.RejectsTable)).
			Scan(&spans, &points, &logs, &rejects)
		require.NoError(c, err)
		assert.Equal(c, [4]int{want + 100 - 11, want, want, 11}, [4]int{spans, points, logs, rejects},
			"spans, gauge points, log records, rejects")
	}, smallPoolBound-time.Since(begin), 50*time.Millisecond, "with max_conns: %d", conns)

	begin = time.Now()
	ctx, cancel = context.WithTimeout(context.Background(), smallPoolBound)
	defer cancel()
	for _, c := range comps {
		require.NoError(t, c.Shutdown(ctx))
	}
	require.Less(t, time.Since(begin), smallPoolBound, "shutdown with max_conns: %d", conns)
	require.Zero(t, clients.Len())
}

func gauges(n int) pmetric.Metrics {
	md := pmetric.NewMetrics()
	g := md.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	g.SetName("pool.gauge")
	dps := g.SetEmptyGauge().DataPoints()
	now := pcommon.NewTimestampFromTime(time.Now())
	for i := range n {
		dp := dps.AppendEmpty()
		dp.SetTimestamp(now)
		dp.SetIntValue(int64(i))
	}
	return md
}

func records(n int) plog.Logs {
	ld := plog.NewLogs()
	lrs := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
	now := pcommon.NewTimestampFromTime(time.Now())
	for i := range n {
		lr := lrs.AppendEmpty()
		lr.SetTimestamp(now)
		lr.Body().SetInt(int64(i))
	}
	return ld
}
