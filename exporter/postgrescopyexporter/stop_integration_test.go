package postgrescopyexporter

import (
	"context"
	"encoding/binary"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.uber.org/zap/zapcore"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
	"github.com/postgrescopy/postgrescopy/internal/testenv/tcpproxy"
)

// spanSource hands out spans with ids unique across the test, and records
// which the exporter acknowledged (Consume returned nil).
type spanSource struct {
	next  atomic.Uint64
	mu    sync.Mutex
	acked map[uint64]bool
}

func (s *spanSource) traces(n int) (ptrace.Traces, []uint64) {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "stop")
	ss := rs.ScopeSpans().AppendEmpty()
	ids := make([]uint64, n)
	now := time.Now()
	for i := range ids {
		ids[i] = s.next.Add(1)
		sp := ss.Spans().AppendEmpty()
		sp.SetName("op")
		var tid pcommon.TraceID
		binary.BigEndian.PutUint64(tid[8:], ids[i])
		var sid pcommon.SpanID
		binary.BigEndian.PutUint64(sid[:], ids[i])
		sp.SetTraceID(tid)
		sp.SetSpanID(sid)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
	}
	return td, ids
}

func (s *spanSource) ack(ids []uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		s.acked[id] = true
	}
}

// send calls Consume from several goroutines, as OTLP clients with a 2 s
// deadline would, until stop is closed.
func (s *spanSource) send(te exporter.Traces, stop <-chan struct{}) (wait func()) {
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				td, ids := s.traces(50)
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				if te.ConsumeTraces(ctx, td) == nil {
					s.ack(ids)
				}
				cancel()
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}
	return wg.Wait
}

// The default direct-mode configuration acknowledges nothing that a stop
// during a PostgreSQL outage can lose, and stops well inside a 30 s grace
// period: PostgreSQL unreachable, or a lock that holds every write.
func TestStopDuringOutageLosesNothingAcknowledged(t *testing.T) {
	for _, outage := range []string{"unreachable", "writes blocked by a lock"} {
		t.Run(outage, func(t *testing.T) {
			cfg, schemaName := testConfig(t)
			// The defaults, as a user's first config gets them.
			def := defaultConfig()
			cfg.QueueConfig, cfg.RetryConfig = def.QueueConfig, def.RetryConfig
			u, err := url.Parse(pgtest.URL())
			require.NoError(t, err)
			addr := ports.AddrT(t)
			proxy := tcpproxy.Start(t, addr, u.Host)
			cfg.Endpoint = configopaque.String("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2")

			ctx := context.Background()
			set, logs := observedSettings()
			te, err := NewFactory().CreateTraces(ctx, set, cfg)
			require.NoError(t, err)
			require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
			src := &spanSource{acked: map[uint64]bool{}}
			warm, ids := src.traces(10)
			require.NoError(t, te.ConsumeTraces(ctx, warm))
			src.ack(ids)

			pool := pgtest.Pool(t)
			var release func()
			if outage == "unreachable" {
				proxy.Close()
				release = func() { tcpproxy.Start(t, addr, u.Host) }
			} else {
				tx, err := pool.Begin(ctx)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, "LOCK TABLE "+quoted(schemaName, "ledger")+" IN ACCESS EXCLUSIVE MODE")
				require.NoError(t, err)
				release = func() { require.NoError(t, tx.Rollback(ctx)) }
			}

			stop := make(chan struct{})
			wait := src.send(te, stop)
			time.Sleep(3 * time.Second)
			close(stop)
			// As a receiver stops: it waits for its calls to return before
			// the exporter is told to stop. Each caller gave up after 2 s.
			began := time.Now()
			returned := make(chan struct{})
			go func() { wait(); close(returned) }()
			select {
			case <-returned:
			case <-time.After(20 * time.Second):
				t.Fatal("callers still waiting 20 s after their 2 s deadline: a receiver's stop would wait for them")
			}
			t.Logf("the callers returned %s after the stop began", time.Since(began))
			require.NoError(t, te.Shutdown(ctx))
			took := time.Since(began)
			t.Logf("sent %d spans, %d acknowledged, shutdown took %s", src.next.Load(), len(src.acked), took)
			assert.Less(t, took, 20*time.Second, "a stop must fit a 30 s grace period")
			assert.Empty(t, logs.FilterMessageSnippet("Dropping data").All(), "nothing acknowledged is dropped")
			for _, e := range logs.FilterMessageSnippet("its senders were answered with the error").All() {
				assert.Contains(t, e.ContextMap(), "items")
			}

			release()
			// What a restart would find: every acknowledged span, once.
			assert.Equal(t, len(src.acked), ackedStoredOnce(t, schemaName, src.acked), "acknowledged spans stored once")
		})
	}
}

func quoted(schema, table string) string {
	return `"` + schema + `"."` + table + `"`
}

// TestDeliveryIsSaidAtStart: direct mode says at start what a stop or a
// crash risks, for the queue the configuration ends up with.
func TestDeliveryIsSaidAtStart(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		level zapcore.Level
		said  string
	}{
		{"default", func(*Config) {}, zapcore.InfoLevel, "a request is acknowledged once its rows are committed (sending_queue::wait_for_result)"},
		{"early acknowledgement", func(c *Config) { c.QueueConfig.Get().WaitForResult = false }, zapcore.WarnLevel, "all of them in a stop during a PostgreSQL outage"},
		{"no queue", func(c *Config) { c.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]() }, zapcore.InfoLevel, "without sending_queue"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, _ := testConfig(t)
			cfg.QueueConfig = defaultConfig().QueueConfig
			tc.edit(cfg)
			_, _, logs := startObservedTraces(t, cfg)
			said := logs.FilterMessageSnippet("direct mode").All()
			require.Len(t, said, 1)
			assert.Equal(t, tc.level, said[0].Level)
			assert.Contains(t, said[0].Message, tc.said)
		})
	}
}

// A stop during an outage with a persistent queue that acknowledges on
// storage: nothing is dropped, the stop does not say it is, and the next
// start writes every acknowledged span once.
func TestStopDuringOutageKeepsThePersistentQueue(t *testing.T) {
	cfg, schemaName := testConfig(t)
	def := defaultConfig()
	cfg.QueueConfig, cfg.RetryConfig = def.QueueConfig, def.RetryConfig
	storageID := component.MustNewID("memstorage")
	host := storageHost{ext: map[component.ID]component.Component{storageID: &memStorage{kv: map[string][]byte{}}}}
	cfg.QueueConfig.Get().StorageID = &storageID
	cfg.QueueConfig.Get().WaitForResult = false
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	addr := ports.AddrT(t)
	proxy := tcpproxy.Start(t, addr, u.Host)
	cfg.Endpoint = configopaque.String("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2")

	ctx := context.Background()
	set, logs := observedSettings()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, host))
	src := &spanSource{acked: map[uint64]bool{}}
	proxy.Close()
	stop := make(chan struct{})
	wait := src.send(te, stop)
	time.Sleep(2 * time.Second)
	close(stop)
	wait()
	began := time.Now()
	require.NoError(t, te.Shutdown(ctx))
	took := time.Since(began)
	require.NotEmpty(t, src.acked)
	assert.Less(t, took, 20*time.Second, "a stop must fit a 30 s grace period")
	assert.Empty(t, logs.FilterMessageSnippet("Dropping data").All(), "the persistent queue keeps what it holds")
	kept := logs.FilterMessageSnippet("not dropped: the persistent queue keeps the request").All()
	for _, e := range kept {
		assert.Equal(t, zapcore.WarnLevel, e.Level)
		assert.Contains(t, e.ContextMap(), "items")
	}

	tcpproxy.Start(t, addr, u.Host)
	c2 := *cfg
	te, err = NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), &c2)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, host))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool {
		return pgtest.Count(t, pool, schemaName, "spans") >= int64(len(src.acked))
	}, 30*time.Second, 50*time.Millisecond)
	require.NoError(t, te.Shutdown(ctx))
	assert.EqualValues(t, len(src.acked), ackedStoredOnce(t, schemaName, src.acked))
	t.Logf("%d spans acknowledged during the outage, %d lines said the stop kept them", len(src.acked), len(kept))
}

// ackedStoredOnce counts the spans of ids that are in spans exactly once, and
// fails on any stored twice.
func ackedStoredOnce(t *testing.T, schemaName string, ids map[uint64]bool) int {
	rows, err := pgtest.Pool(t).Query(context.Background(), "SELECT span_id, count(*) FROM "+quoted(schemaName, "spans")+" GROUP BY 1")
	require.NoError(t, err)
	n := 0
	for rows.Next() {
		var sid, count int64
		require.NoError(t, rows.Scan(&sid, &count))
		require.EqualValues(t, 1, count, "span %d stored %d times", sid, count)
		if ids[uint64(sid)] {
			n++
		}
	}
	require.NoError(t, rows.Err())
	return n
}

// An outage of direct writes is said once at Warn, when the first write
// fails, and its end once at Info: the retry sender's own lines are Info,
// one per attempt.
func TestWriteOutageIsWarnedOnceAndItsEndSaid(t *testing.T) {
	cfg, _ := testConfig(t)
	def := defaultConfig()
	cfg.QueueConfig, cfg.RetryConfig = def.QueueConfig, def.RetryConfig
	cfg.RetryConfig.InitialInterval = 100 * time.Millisecond
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	addr := ports.AddrT(t)
	proxy := tcpproxy.Start(t, addr, u.Host)
	cfg.Endpoint = configopaque.String("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2")
	ctx := context.Background()
	set, logs := observedSettings()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	src := &spanSource{acked: map[uint64]bool{}}
	td, _ := src.traces(5)
	require.NoError(t, te.ConsumeTraces(ctx, td))

	proxy.Close()
	for range 3 {
		td, _ := src.traces(5)
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		require.Error(t, te.ConsumeTraces(cctx, td), "not acknowledged while PostgreSQL is away")
		cancel()
	}
	tcpproxy.Start(t, addr, u.Host)
	td, _ = src.traces(5)
	require.NoError(t, te.ConsumeTraces(ctx, td))

	warned := logs.FilterMessage("PostgreSQL writes are failing; retrying until they succeed, batches are held meanwhile").All()
	require.Len(t, warned, 1)
	assert.Equal(t, zapcore.WarnLevel, warned[0].Level)
	assert.Equal(t, "postgres@"+addr+"/postgres", warned[0].ContextMap()["target"])
	ended := logs.FilterMessage("PostgreSQL writes succeed again").All()
	require.Len(t, ended, 1)
	assert.Equal(t, zapcore.InfoLevel, ended[0].Level)
	assert.GreaterOrEqual(t, ended[0].ContextMap()["failed_attempts"], int64(3))
}
