package postgrescopyexporter

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumererror"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// bytesQueueConfig is the default direct-mode queue (sized in bytes) shrunk
// to its smallest valid size, so that a test fills it with a few requests.
func bytesQueueConfig(t *testing.T) (*Config, string) {
	cfg, schemaName := testConfig(t)
	cfg.QueueConfig = metadata.NewDefaultSendingQueueConfig()
	q := cfg.QueueConfig.Get()
	require.Equal(t, exporterhelper.RequestSizerTypeBytes, q.Sizer, "the default queue counts bytes")
	q.QueueSize = minQueueBytes
	require.NoError(t, cfg.Validate())
	return cfg, schemaName
}

// TestBytesQueueRefusesBeyondItsBoundAsRetryable: the default queue holds
// at most queue_size bytes of requests not yet committed; with PostgreSQL
// stalled (the spans table locked) and block_on_overflow off, the request
// past the bound is refused as retryable (backpressure, the client resends
// it), and every request the queue took is committed once PostgreSQL moves.
func TestBytesQueueRefusesBeyondItsBoundAsRetryable(t *testing.T) {
	cfg, schemaName := bytesQueueConfig(t)
	cfg.QueueConfig.Get().BlockOnOverflow = false
	te, _ := startTraces(t, cfg)
	ctx := context.Background()
	pool := pgtest.Pool(t)
	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	rolledBack := false
	release := func() {
		if !rolledBack {
			rolledBack = true
			require.NoError(t, tx.Rollback(ctx))
		}
	}
	t.Cleanup(release) // before the exporter's shutdown (cleanups run last first)
	_, err = tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{schemaName, "spans"}.Sanitize()+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)

	const spans = 2000
	size := (&ptrace.ProtoMarshaler{}).TracesSize(uniqueTraces(0, spans))
	fits := minQueueBytes / size
	require.Greater(t, fits, 1)

	var accepted []chan error
	var refused error
	for i := 0; i < 2*fits+2 && refused == nil; i++ {
		done := make(chan error, 1)
		go func() { done <- te.ConsumeTraces(ctx, uniqueTraces(i, spans)) }()
		select {
		case err := <-done:
			require.Error(t, err, "request %d returned before its rows could be written", i)
			refused = err
		case <-time.After(500 * time.Millisecond):
			accepted = append(accepted, done)
		}
	}
	require.Error(t, refused, "no request was refused: the queue is not bounded by bytes")
	require.False(t, consumererror.IsPermanent(refused), "a full queue is backpressure, not a permanent refusal: %v", refused)
	require.Len(t, accepted, fits, "requests of %d bytes held by a %d-byte queue", size, minQueueBytes)

	release()
	for i, done := range accepted {
		select {
		case err := <-done:
			require.NoError(t, err, "accepted request %d", i)
		case <-time.After(30 * time.Second):
			t.Fatalf("accepted request %d not committed", i)
		}
	}
	require.EqualValues(t, fits*spans, pgtest.Count(t, pool, schemaName, "spans"))
}

// TestRequestLargerThanQueueIsSplit: a request larger than the whole queue
// is cut into pieces that fit and written, not refused; the call returns
// once every piece is committed.
func TestRequestLargerThanQueueIsSplit(t *testing.T) {
	cfg, schemaName := bytesQueueConfig(t)
	te, _ := startTraces(t, cfg)
	td := uniqueTraces(1, 30_000)
	require.Greater(t, (&ptrace.ProtoMarshaler{}).TracesSize(td), 3*minQueueBytes)
	require.NoError(t, te.ConsumeTraces(context.Background(), td))
	pool := pgtest.Pool(t)
	require.EqualValues(t, 30_000, pgtest.Count(t, pool, schemaName, "spans"))
	var distinct int64
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(DISTINCT span_id) FROM "+pgx.Identifier{schemaName, "spans"}.Sanitize()).Scan(&distinct))
	require.EqualValues(t, 30_000, distinct)
}

// TestLeafLargerThanQueueIsPermanent: one span larger than the whole queue
// cannot be cut further; it is refused as permanent, naming the key to raise,
// so the client does not resend it forever.
func TestLeafLargerThanQueueIsPermanent(t *testing.T) {
	cfg, _ := bytesQueueConfig(t)
	te, _ := startTraces(t, cfg)
	td := makeTraces(3, "huge")
	td.ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(1).Attributes().PutStr("blob", strings.Repeat("x", 2*minQueueBytes))
	err := te.ConsumeTraces(context.Background(), td)
	require.Error(t, err)
	require.True(t, consumererror.IsPermanent(err), "not permanent: %v", err)
	require.ErrorContains(t, err, fmt.Sprintf("sending_queue::queue_size (%d bytes", minQueueBytes))
}
