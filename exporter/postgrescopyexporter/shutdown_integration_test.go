package postgrescopyexporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
)

// TestShutdownReturnsAtItsDeadlineWhenAWorkerIgnoresCancellation: a flush
// worker that ignores both its loop's and its writes' cancellation does not
// hold Shutdown past its context; the clients are closed once it returns,
// and nothing is left running.
func TestShutdownReturnsAtItsDeadlineWhenAWorkerIgnoresCancellation(t *testing.T) {
	cfg, _ := testConfig(t)
	_, prefix := testRedis(t)
	cfg = withRedis(cfg, prefix, "ignores")
	c, err := newClient(cfg, componenttest.NewNopTelemetrySettings())
	require.NoError(t, err)
	stuck, release := make(chan struct{}), make(chan struct{})
	first := true
	c.wrapWorker = func(run func(context.Context)) func(context.Context) {
		if !first {
			return run
		}
		first = false // coord makes the workers one after the other
		return func(context.Context) {
			close(stuck)
			<-release // deaf to every context
		}
	}
	require.NoError(t, c.start(context.Background()))
	<-stuck

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	done := make(chan error, 1)
	go func() { done <- c.shutdown(ctx) }()
	select {
	case err := <-done:
		assert.ErrorIs(t, err, context.DeadlineExceeded, "Shutdown says its deadline passed")
		assert.Less(t, time.Since(began), 2*time.Second)
	case <-time.After(10 * time.Second):
		close(release)
		<-done
		t.Fatal("Shutdown waited for a goroutine that ignores cancellation")
	}
	assert.NoError(t, c.sink.Ping(context.Background()), "the pool stays open while the worker may still use it")
	close(release)
	require.Eventually(t, func() bool { return c.sink.Ping(context.Background()) != nil }, 10*time.Second, 10*time.Millisecond,
		"the pool is closed once the worker returned")
}
