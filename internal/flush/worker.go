package flush

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v7"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// Stream is one signal's stream as its consumer sees it: *coord.WorkerStream
// (a *coord.Stream whose Ensure tracks the epochs).
type Stream interface {
	// Name is the stream's key, for logs and the quarantine.
	Name() string
	// Ledger is the name the ledger records the entries under: the same for
	// every shard of a signal.
	Ledger() string
	// Ensure creates the stream and the group when missing.
	Ensure(ctx context.Context) error
	ReadNew(ctx context.Context, count int64, block time.Duration) ([]coord.Entry, error)
	ReadOwnPending(ctx context.Context, count int64) ([]coord.Entry, error)
	Claim(ctx context.Context, minIdle time.Duration, count int64) ([]coord.Entry, error)
	Ack(ctx context.Context, entries []coord.Entry) error
}

// Writer is the PostgreSQL side the workers of a replica share.
type Writer interface {
	// Ready reports whether the schema is ready for writes.
	Ready() bool
	// InFlight is the number of writes in flight on this replica.
	InFlight() int
	// Layout is this replica's column layout.
	Layout() *tables.Layout
	// OtherLayout returns the layout an entry descriptor describes.
	OtherLayout(desc []byte) (*tables.Layout, error)
	// Committed returns which of keys the ledger of stream holds.
	Committed(ctx context.Context, stream string, keys []string) (map[string]bool, error)
	// WriteEntries streams entries into COPY with ledger in one transaction.
	WriteEntries(ctx context.Context, s *entry.Entries, ledger *pgwrite.Ledger) error
	// WriteBatch writes b with ledger in one transaction, isolating refused
	// rows.
	WriteBatch(ctx context.Context, b *rows.Batch, ledger *pgwrite.Ledger) error
}

// Clock tells the batching policy the time.
type Clock interface{ Now() time.Time }

type wallClock struct{}

func (wallClock) Now() time.Time { return time.Now() }

// Config is the batching policy and what a write needs.
type Config struct {
	MaxRows    int
	MaxBytes   int64
	MaxWait    time.Duration
	ClaimAfter time.Duration
	// Timeout bounds one write; zero means none.
	Timeout time.Duration
	// Quarantine names the quarantine table in log lines.
	Quarantine string
	// NewBatch returns an empty batch of a layout, under the row limits.
	NewBatch func(*tables.Layout) *rows.Batch
	// Admission, shared by a replica's workers of every signal, orders their
	// writes oldest data first; nil writes at once.
	Admission *Admission
}

// Telemetry is what the workers count.
type Telemetry struct {
	Claimed, LedgerHits, Undecodable metric.Int64Counter
	BatchRows                        metric.Int64Histogram
	// Attrs are the attributes of every measurement (the signal).
	Attrs metric.MeasurementOption
}

// entriesPerRead bounds one XREADGROUP: entries are whole requests, so a
// batch of max_rows usually needs only a few reads.
const entriesPerRead = 16

// quietFraction: a batch is flushed early when no new entry came for
// max_wait/quietFraction after the last read.
const quietFraction = 10

// idleWrites: a worker with entries flushes at once while fewer writes than
// this are in flight on its replica.
const idleWrites = 2

// quietPolls: a worker holding entries while it waits for the stream to go
// quiet looks this many times per quiet period whether PostgreSQL has become
// idle meanwhile (a write finished), and then flushes at once rather than at
// the end of the wait.
const quietPolls = 5

// Worker is one flush worker of one signal: it owns a consumer name in the
// group, reads and claims entries, writes them in one transaction with their
// ledger rows, then acknowledges and deletes them.
type Worker struct {
	cfg    Config
	stream Stream
	w      Writer
	tel    Telemetry
	logger *zap.Logger
	clock  Clock
	// writes is the context writes run in: not cancelled when the worker's
	// loop stops, only when the shutdown deadline passes, so that a write in
	// flight at shutdown finishes if it can in time.
	writes context.Context

	entries       entry.Entries                  // the entries of a streamed write
	batch         *rows.Batch                    // a write through a batch (damage, refused rows)
	others        map[*tables.Layout]*rows.Batch // batches of other replicas' layouts
	ownPending    bool                           // a flush failed: re-read this consumer's pending entries first
	perEntry      int                            // items per entry in the last reads, to size the next
	bytesPerEntry int                            // and bytes (entryBytes) per entry
	lastClaim     time.Time
	lastProblem   string
}

// New returns a worker of stream writing through w. writes is the context
// of its writes (see Worker.writes).
func New(cfg Config, stream Stream, w Writer, tel Telemetry, logger *zap.Logger, writes context.Context) *Worker {
	return &Worker{cfg: cfg, stream: stream, w: w, tel: tel, logger: logger, clock: wallClock{}, writes: writes,
		batch: cfg.NewBatch(w.Layout())}
}

// Backoff is the retry delay of the workers' and the exporter's background
// loops: doubling from initial up to maxDelay, without jitter.
func Backoff(initial, maxDelay time.Duration) *backoff.ExponentialBackOff {
	return &backoff.ExponentialBackOff{InitialInterval: initial, Multiplier: 2, MaxInterval: maxDelay}
}

// Sleep waits d or until ctx is done, and reports whether ctx is still live.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Run works until ctx is done.
func (f *Worker) Run(ctx context.Context) {
	f.waitGroup(ctx)
	retry := Backoff(100*time.Millisecond, 10*time.Second)
	for ctx.Err() == nil {
		if !f.w.Ready() {
			Sleep(ctx, 200*time.Millisecond)
			continue
		}
		entries, err := f.next(ctx)
		if err == nil && len(entries) > 0 {
			err = f.flush(ctx, entries)
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			if coord.IsNoGroup(err) {
				// Redis lost the stream or the group (a restart without
				// persistence): recreate them, and read what was added since.
				f.problem("Redis lost the consumer group; recreating it", err)
				if err := f.stream.Ensure(ctx); err == nil {
					continue
				}
			}
			f.ownPending = true
			f.problem("flush worker is retrying", err)
			Sleep(ctx, retry.NextBackOff())
			continue
		}
		if f.lastProblem != "" {
			f.logger.Info("flush worker recovered", zap.String("stream", f.stream.Name()))
			f.lastProblem = ""
		}
		retry.Reset()
	}
}

// waitGroup creates the consumer group, waiting for Redis if needed. Start
// logged an unreachable Redis already: the wait is logged at debug level.
func (f *Worker) waitGroup(ctx context.Context) {
	retry := Backoff(500*time.Millisecond, 10*time.Second)
	for ctx.Err() == nil {
		err := f.stream.Ensure(ctx)
		if err == nil {
			return
		}
		if s := err.Error(); s != f.lastProblem {
			f.lastProblem = s
			f.logger.Debug("waiting for Redis", zap.String("stream", f.stream.Name()), zap.Error(err))
		}
		Sleep(ctx, retry.NextBackOff())
	}
}

// problem logs a failure when it differs from the previous one.
func (f *Worker) problem(msg string, err error) {
	if s := err.Error(); s != f.lastProblem {
		f.lastProblem = s
		f.logger.Warn(msg, zap.String("stream", f.stream.Name()), zap.Error(err))
	}
}
