package loadgenreceiver

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver/internal/metadata"
)

func checkRetries(t *testing.T, snap Snapshot, refusals int64) {
	t.Helper()
	assert.Equal(t, refusals, snap.Retries, "one resend per refusal")
	assert.Positive(t, snap.RetriedOK)
	assert.Zero(t, snap.Dropped)
}

// A pipeline that keeps refusing is given up on after max_elapsed_time:
// the batches are dropped and counted, generation ends.
func TestRetriesGiveUp(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users = 1
	cfg.BatchSize = 1000
	cfg.RetryOnFailure.InitialInterval = 5 * time.Millisecond
	cfg.RetryOnFailure.MaxInterval = 10 * time.Millisecond
	cfg.RetryOnFailure.MaxElapsedTime = 40 * time.Millisecond
	refuse := consumertest.NewErr(errors.New("sending queue is full"))
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), refuse, refuse, refuse)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)
	snap := stats.Snapshot()
	assert.Equal(t, int64(1900), snap.Dropped)
	assert.Positive(t, snap.Retries)
	assert.Zero(t, snap.RetriedOK)
}

// Retries off: a refused batch is dropped at once, as before.
func TestRetriesOff(t *testing.T) {
	stats := NewStats()
	f := NewFactoryWithStats(stats)
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Users = 1
	cfg.RetryOnFailure.Enabled = false
	refuse := consumertest.NewErr(errors.New("sending queue is full"))
	comps := startAll(t, f, cfg, receivertest.NewNopSettings(metadata.Type), refuse, refuse, refuse)
	waitDone(t, stats, 20*time.Second)
	shutdownAll(t, comps)
	snap := stats.Snapshot()
	assert.Equal(t, int64(1900), snap.Dropped)
	assert.Equal(t, int64(1900), snap.Refused)
	assert.Zero(t, snap.Retries)
}
