package postgrescopyexporter

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// TestRedisSentinelUnknownMasterStartsAndSaysWhy: a sentinel that does not
// monitor redis::sentinel::master_name (a typo, or not yet monitoring) is
// a Redis not reachable yet: the exporter starts, its loops keep asking
// without a panic, the log names the cause once, and requests are refused
// as retryable with the same cause.
func TestRedisSentinelUnknownMasterStartsAndSaysWhy(t *testing.T) {
	pgtest.Pool(t) // skips (-short, no PostgreSQL) before any server starts
	shortStats(t)
	primary := redistest.Start(t, "")
	sentinels := startSentinels(t, primary, 0, 1, "")
	cfg, _ := sentinelConfig(t, primary, sentinels, "", 0)
	cfg.Redis.Get().Sentinel.Get().MasterName = "typo"
	cfg.RetryConfig.Enabled = false
	waitDialProbers(t)
	te, _, logs := startObservedTraces(t, cfg)
	// Maintenance ticks and worker retries meanwhile: none may panic, and
	// the maintenance loop says why it cannot read the streams.
	require.Eventually(t, func() bool {
		for _, e := range logs.FilterMessageSnippet("cannot read the Redis streams").All() {
			if strings.Contains(fmt.Sprint(e.ContextMap()), `sentinel does not know master_name "typo"`) {
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the maintenance loop does not say why it cannot read the streams")
	time.Sleep(10 * statsEvery)
	err := te.ConsumeTraces(context.Background(), uniqueTraces(1, 3))
	require.Error(t, err)
	t.Log(err)
	assert.Contains(t, err.Error(), `sentinel does not know master_name "typo"`)
	assert.False(t, consumererror.IsPermanent(err), "a sentinel may start monitoring the name: retryable")
	var said []observer.LoggedEntry
	for _, e := range logs.All() {
		if e.Level >= zapcore.WarnLevel {
			t.Logf("%s: %s %v", e.Level, e.Message, e.ContextMap())
		}
		// exporterhelper logs each refused request: not the exporter's.
		if strings.Contains(fmt.Sprint(e.Message, e.ContextMap()), `sentinel does not know master_name "typo"`) &&
			!strings.HasPrefix(e.Message, "Exporting failed") {
			said = append(said, e)
		}
	}
	require.NotEmpty(t, said, "the cause is logged")
	for _, e := range said {
		assert.GreaterOrEqual(t, e.Level, zapcore.WarnLevel)
	}
	assert.LessOrEqual(t, len(said), 2, "said at start and by the maintenance loop, not at every retry")
}

// waitDialProbers waits, once the test is done (register it before the
// exporter starts: cleanups run last first), for go-redis's dial probers
// of an unreachable server to end: they see the client's Close only after
// their 1s sleep, and goleak would flag them.
func waitDialProbers(t *testing.T) {
	t.Cleanup(func() {
		require.Eventually(t, func() bool {
			buf := make([]byte, 1<<22)
			return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("(*ConnPool).tryDial"))
		}, 5*time.Second, 50*time.Millisecond, "go-redis dial goroutines outlive Close")
	})
}
