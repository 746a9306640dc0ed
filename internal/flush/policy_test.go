package flush

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/metric/noop"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/internal/coord"
	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

// fakeClock is the policy's time, moved only by the fake stream's reads.
type fakeClock struct{ now time.Time }

func (c *fakeClock) Now() time.Time { return c.now }

// arrival is an entry added to the stream at a time after the test's start.
type arrival struct {
	at time.Duration
	e  coord.Entry
}

// fakeStream delivers its arrivals as XREADGROUP would: what has arrived at
// once, else the next arrival within the block time (moving the clock to
// it), else nothing after the whole block time.
type fakeStream struct {
	clock    *fakeClock
	t0       time.Time
	queue    []arrival
	claimed  []coord.Entry
	acked    []coord.Entry
	readNews int
}

func (s *fakeStream) Name() string                                                 { return "{test:traces}:stream" }
func (s *fakeStream) Ledger() string                                               { return "{test:traces}:stream" }
func (s *fakeStream) Ensure(context.Context) error                                 { return nil }
func (s *fakeStream) ReadOwnPending(context.Context, int64) ([]coord.Entry, error) { return nil, nil }

func (s *fakeStream) Claim(context.Context, time.Duration, int64) ([]coord.Entry, error) {
	c := s.claimed
	s.claimed = nil
	return c, nil
}

func (s *fakeStream) Ack(_ context.Context, entries []coord.Entry) error {
	s.acked = append(s.acked, entries...)
	return nil
}

func (s *fakeStream) ReadNew(_ context.Context, count int64, block time.Duration) ([]coord.Entry, error) {
	s.readNews++
	if block <= 0 {
		block = time.Millisecond // as coord.Stream: never BLOCK 0
	}
	if len(s.queue) > 0 && s.t0.Add(s.queue[0].at).After(s.clock.now) {
		next := s.t0.Add(s.queue[0].at)
		if next.After(s.clock.now.Add(block)) {
			s.clock.now = s.clock.now.Add(block)
			return nil, nil
		}
		s.clock.now = next
	}
	if len(s.queue) == 0 {
		s.clock.now = s.clock.now.Add(block)
		return nil, nil
	}
	var out []coord.Entry
	for len(s.queue) > 0 && int64(len(out)) < count && !s.t0.Add(s.queue[0].at).After(s.clock.now) {
		out = append(out, s.queue[0].e)
		s.queue = s.queue[1:]
	}
	return out, nil
}

// every returns n arrivals spaced by gap from start, of items and bytes each.
func every(start, gap time.Duration, n, items, bytes int) []arrival {
	out := make([]arrival, n)
	for i := range out {
		out[i] = arrival{at: start + time.Duration(i)*gap, e: coord.Entry{ID: "id", Format: "test", Items: items, Data: make([]byte, bytes)}}
	}
	return out
}

// fakeWriter is a PostgreSQL with inFlight writes in flight at each moment.
type fakeWriter struct {
	inFlight func() int
	written  [][]string // ledger keys of each write
	kept     int        // entries quarantined
}

func (w *fakeWriter) Ready() bool            { return true }
func (w *fakeWriter) InFlight() int          { return w.inFlight() }
func (w *fakeWriter) Layout() *tables.Layout { return tables.DefaultLayout() }
func (w *fakeWriter) OtherLayout([]byte) (*tables.Layout, error) {
	return tables.DefaultLayout(), nil
}

func (w *fakeWriter) Committed(context.Context, string, []string) (map[string]bool, error) {
	return nil, nil
}

func (w *fakeWriter) WriteEntries(_ context.Context, _ *entry.Entries, l *pgwrite.Ledger) error {
	w.written = append(w.written, append([]string(nil), l.IDs...))
	return nil
}

func (w *fakeWriter) WriteBatch(_ context.Context, _ *rows.Batch, l *pgwrite.Ledger) error {
	w.written = append(w.written, append([]string(nil), l.IDs...))
	w.kept += len(l.Quarantine)
	return nil
}

const (
	testMaxWait = time.Second
	testQuiet   = testMaxWait / quietFraction
	testPoll    = testQuiet / quietPolls
)

// policy is a worker of arrivals under cfg's limits, with a PostgreSQL that
// has inFlight writes in flight at each moment since the start.
func policy(t *testing.T, maxRows int, maxBytes int64, arrivals []arrival, inFlight func(since time.Duration) int) (*Worker, *fakeStream) {
	t.Helper()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	s := &fakeStream{clock: clock, t0: clock.now, queue: arrivals}
	w := &fakeWriter{inFlight: func() int { return inFlight(clock.now.Sub(s.t0)) }}
	noopMeter := noop.NewMeterProvider().Meter("test")
	c, err := noopMeter.Int64Counter("c")
	require.NoError(t, err)
	h, err := noopMeter.Int64Histogram("h")
	require.NoError(t, err)
	cfg := Config{MaxRows: maxRows, MaxBytes: maxBytes, MaxWait: testMaxWait, ClaimAfter: time.Hour,
		NewBatch: func(l *tables.Layout) *rows.Batch { b := new(rows.Batch); b.SetLayout(l); return b }}
	f := New(cfg, s, w, Telemetry{Claimed: c, LedgerHits: c, Undecodable: c, BatchRows: h}, zap.NewNop(), context.Background())
	f.clock = clock
	return f, s
}

func busy(time.Duration) int { return idleWrites }
func idle(time.Duration) int { return 0 }

// next runs one round of the policy and returns its entries' items and bytes
// and when (since the start) it returned.
func next(t *testing.T, f *Worker, s *fakeStream) (entries, items, size int, at time.Duration) {
	t.Helper()
	got, err := f.next(context.Background())
	require.NoError(t, err)
	for _, e := range got {
		items += e.Items
		size += len(e.Data)
	}
	return len(got), items, size, s.clock.now.Sub(s.t0)
}

// max_rows: a busy PostgreSQL and a stream that never goes quiet; the batch
// ends when it holds max_rows, long before max_wait.
func TestNextFlushesAtMaxRows(t *testing.T) {
	f, s := policy(t, 1000, 1<<40, every(0, 5*time.Millisecond, 1000, 100, 10), busy)
	_, items, _, at := next(t, f, s)
	assert.Equal(t, 1000, items, "exactly max_rows: reads are sized to what is left")
	assert.Less(t, at, testQuiet, "ended by max_rows, not by max_wait or a quiet stream")
}

// max_bytes: the same, with entries that reach max_bytes first.
func TestNextFlushesAtMaxBytes(t *testing.T) {
	f, s := policy(t, 1<<30, 10_000, every(0, 5*time.Millisecond, 1000, 1, 1000), busy)
	_, _, size, at := next(t, f, s)
	assert.Equal(t, 10_000, size)
	assert.Less(t, at, testQuiet, "ended by max_bytes, not by max_wait or a quiet stream")
}

// max_bytes with a backlog: every entry is there at once. The first read
// knows nothing of the entries and reads a full count; the next batches
// read what max_bytes has room for, not a full count past it (a span
// request is megabytes: a full read would double a transaction).
func TestNextReadsWhatMaxBytesHasRoomFor(t *testing.T) {
	f, s := policy(t, 1<<30, 10_000, every(0, 0, 100, 1, 1000), busy)
	next(t, f, s)
	for range 3 {
		n, _, size, _ := next(t, f, s)
		assert.Equal(t, 10, n)
		assert.Equal(t, 10_000, size)
	}
}

// max_wait: entries keep coming, faster than the quiet period and never up
// to a limit; the batch ends max_wait after its first entry (not after the
// read began: the stream was empty for 300ms).
func TestNextFlushesAtMaxWait(t *testing.T) {
	first := 300 * time.Millisecond
	f, s := policy(t, 1<<30, 1<<40, every(first, testQuiet/2, 200, 1, 10), busy)
	_, _, _, at := next(t, f, s)
	assert.GreaterOrEqual(t, at, first+testMaxWait-testQuiet/2, "the wait runs from the first entry")
	assert.LessOrEqual(t, at, first+testMaxWait, "max_wait after the first entry, at most")
}

// A stream that goes quiet (no entry for max_wait/10) ends the batch even
// though PostgreSQL is busy and no limit is reached.
func TestNextFlushesWhenStreamGoesQuiet(t *testing.T) {
	f, s := policy(t, 1<<30, 1<<40, every(0, 10*time.Millisecond, 3, 1, 10), busy)
	n, _, _, at := next(t, f, s)
	assert.Equal(t, 3, n)
	last := 20 * time.Millisecond
	assert.GreaterOrEqual(t, at, last+testQuiet, "a busy PostgreSQL lets the batch fill until the stream is quiet")
	assert.Less(t, at, last+testQuiet+testPoll, "then it flushes, long before max_wait")
}

// With (nearly) no write in flight, waiting would only leave PostgreSQL
// idle: the first entries read are flushed at once.
func TestNextFlushesAtOnceWhenPostgresIsIdle(t *testing.T) {
	f, s := policy(t, 1<<30, 1<<40, every(0, 10*time.Millisecond, 3, 1, 10), idle)
	n, _, _, at := next(t, f, s)
	assert.Equal(t, 1, n, "the first read's entries, without waiting for the rest")
	assert.Zero(t, at)
}

// A worker holding entries while PostgreSQL is busy waits for more; when the
// writes in flight drop below idleWrites during that wait, it flushes within
// a poll (quiet/quietPolls), not at the end of the quiet period.
func TestNextStopsWaitingWhenPostgresGoesIdle(t *testing.T) {
	idleAt := 50 * time.Millisecond
	f, s := policy(t, 1<<30, 1<<40, every(0, 0, 1, 1, 10), func(since time.Duration) int {
		if since < idleAt {
			return idleWrites
		}
		return 0
	})
	n, _, _, at := next(t, f, s)
	assert.Equal(t, 1, n)
	assert.GreaterOrEqual(t, at, idleAt, "nothing ends the wait while PostgreSQL is busy and the stream not yet quiet")
	assert.Less(t, at, idleAt+testPoll+time.Millisecond, "within a poll of PostgreSQL going idle")
	assert.Less(t, at, testQuiet, "before the stream counts as quiet")
}

// Claimed entries (abandoned by another consumer) come before new ones.
func TestNextClaimsAbandonedEntriesFirst(t *testing.T) {
	f, s := policy(t, 1000, 1<<40, every(0, 0, 5, 1, 10), busy)
	s.claimed = []coord.Entry{{ID: "abandoned", Format: "test", Items: 1, Redelivered: true}}
	got, err := f.next(context.Background())
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, "abandoned", got[0].ID)
	assert.Zero(t, s.readNews, "no new entry read in that round")
}

// A deleted entry is only acknowledged, an entry of a newer release's format
// is left pending, an entry without a format is quarantined with the batch.
func TestFlushDeletedNewerAndFormatless(t *testing.T) {
	f, s := policy(t, 1000, 1<<40, nil, busy)
	entries := []coord.Entry{
		{ID: "1-0", Deleted: true, Redelivered: true},
		{ID: "2-0", Key: "k2", Format: "copy9", Data: []byte("from the future")},
		{ID: "3-0", Key: "k3", Data: []byte("no format")},
	}
	require.NoError(t, f.flush(context.Background(), entries))
	w := f.w.(*fakeWriter)
	assert.Equal(t, [][]string{{"k3"}}, w.written, "only the formatless entry is written, to the quarantine, under its key")
	assert.Equal(t, 1, w.kept)
	var acked []string
	for _, e := range s.acked {
		acked = append(acked, e.ID)
	}
	assert.Equal(t, []string{"1-0", "3-0"}, acked, "the newer format's entry stays pending")
}

// TestPreviousFormatIsRead: entries of earlier releases (copy1, copy2),
// still pending at an upgrade, are read and written, never left or
// quarantined for their format; a newer release's are left pending; an
// entry without a format goes to the quarantine through the batch path.
func TestPreviousFormatIsRead(t *testing.T) {
	for f, want := range map[string]bool{"copy1": true, "copy2": true, entry.Format: true, "": true, "copy9": false} {
		if got := readable(coord.Entry{Format: f}); got != want {
			t.Errorf("readable(%q) = %v, want %v", f, got, want)
		}
	}
	f, s := policy(t, 1000, 1<<40, nil, busy)
	var entries []coord.Entry
	for i, format := range []string{"copy1", "copy2", entry.Format} {
		var b rows.Batch
		b.AddTraces(oneSpanTraces(int64(i)))
		data, err := entry.Append(nil, &b, true)
		require.NoError(t, err)
		entries = append(entries, coord.Entry{ID: fmt.Sprintf("%d-0", i+1), Key: format, Format: format, Data: data, Items: 1})
	}
	require.NoError(t, f.flush(context.Background(), entries))
	w := f.w.(*fakeWriter)
	assert.Equal(t, [][]string{{"copy1", "copy2", entry.Format}}, w.written, "written together, as the entries they are")
	assert.Zero(t, w.kept, "none quarantined")
	assert.Len(t, s.acked, 3)
}

// A committed write is said at debug level with its items, its start and
// length, and each entry's wait in Redis: what shows which flushes a burst
// ends on.
func TestCommittedWriteIsLogged(t *testing.T) {
	f, s := policy(t, 1000, 1<<40, nil, busy)
	core, logs := observer.New(zapcore.DebugLevel)
	f.logger = zap.New(core)
	var entries []coord.Entry
	for i := range 2 {
		var b rows.Batch
		b.AddTraces(oneSpanTraces(int64(i)))
		data, err := entry.Append(nil, &b, true)
		require.NoError(t, err)
		entries = append(entries, coord.Entry{ID: fmt.Sprintf("%d-0", time.Now().UnixMilli()-int64(i)), Key: fmt.Sprint("k", i), Format: entry.Format, Data: data, Items: 3})
	}
	before := time.Now()
	require.NoError(t, f.flush(context.Background(), entries))
	assert.Len(t, s.acked, 2)
	got := logs.FilterMessage("entries committed").All()
	require.Len(t, got, 1)
	fields := got[0].ContextMap()
	assert.EqualValues(t, 6, fields["items"])
	assert.Contains(t, fields, "write_ms")
	start, ok := fields["write_start"].(time.Time)
	require.True(t, ok, "write_start is a time: %v", fields["write_start"])
	assert.False(t, start.Before(before), "the write started after the flush began")
	assert.Len(t, fields["xadd_to_commit_ms"], 2)
}

// oneSpanTraces is one span with attribute i.
func oneSpanTraces(i int64) ptrace.Traces {
	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetStartTimestamp(1_700_000_000_000_000_000)
	sp.Attributes().PutInt("i", i)
	return td
}
