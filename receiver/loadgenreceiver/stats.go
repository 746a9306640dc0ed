package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stats counts what a run has handed to the pipeline. A bench reads it while
// the run goes and waits on Done for the end. Spans, DataPoints and
// LogRecords count each generated item once, resent or not; what the
// pipeline never accepted is Dropped.
type Stats struct {
	Traces     atomic.Int64 // traces begun (a trace split over batches counts once)
	Spans      atomic.Int64
	DataPoints atomic.Int64
	LogRecords atomic.Int64
	Refused    atomic.Int64 // items of ConsumeX calls that returned an error, every attempt
	Retries    atomic.Int64 // ConsumeX calls that resent a refused batch
	RetriedOK  atomic.Int64 // items accepted on a resend
	Dropped    atomic.Int64 // items given up on: a permanent error, or retries exhausted or off
	Batches    atomic.Int64 // ConsumeX calls
	Bytes      atomic.Int64 // OTLP protobuf size of the batches, an estimate of the payload

	// OnDone, when set before the run starts, is called once when the run
	// ends, with the final counts.
	OnDone func(Snapshot)

	once     sync.Once
	doneCh   chan struct{}
	finished atomic.Bool
	started  atomic.Int64 // unix ns
	ended    atomic.Int64
}

// NewStats returns Stats ready to be passed to NewFactoryWithStats.
func NewStats() *Stats {
	return &Stats{doneCh: make(chan struct{})}
}

// Done is closed when generation ends: every user done, duration reached, or
// the receiver shut down.
func (s *Stats) Done() <-chan struct{} { return s.doneCh }

// Finished reports whether generation has ended.
func (s *Stats) Finished() bool { return s.finished.Load() }

// Snapshot is a copy of the counters at one moment.
type Snapshot struct {
	Traces, Spans, DataPoints, LogRecords, Refused, Retries, RetriedOK, Dropped, Batches, Bytes int64
	// Elapsed is the run's duration so far, or in all once it has ended.
	Elapsed  time.Duration
	Finished bool
}

// Items is spans + data points + log records.
func (s Snapshot) Items() int64 { return s.Spans + s.DataPoints + s.LogRecords }

// Snapshot reads the counters.
func (s *Stats) Snapshot() Snapshot {
	snap := Snapshot{
		Traces:     s.Traces.Load(),
		Spans:      s.Spans.Load(),
		DataPoints: s.DataPoints.Load(),
		LogRecords: s.LogRecords.Load(),
		Refused:    s.Refused.Load(),
		Retries:    s.Retries.Load(),
		RetriedOK:  s.RetriedOK.Load(),
		Dropped:    s.Dropped.Load(),
		Batches:    s.Batches.Load(),
		Bytes:      s.Bytes.Load(),
		Finished:   s.finished.Load(),
	}
	if start := s.started.Load(); start != 0 {
		end := s.ended.Load()
		if end == 0 {
			end = time.Now().UnixNano()
		}
		snap.Elapsed = time.Duration(end - start)
	}
	return snap
}

func (s *Stats) begin() { s.started.CompareAndSwap(0, time.Now().UnixNano()) }

// finish marks the end once, then closes Done and calls OnDone.
func (s *Stats) finish() {
	s.once.Do(func() {
		s.ended.Store(time.Now().UnixNano())
		s.finished.Store(true)
		close(s.doneCh)
		if s.OnDone != nil {
			s.OnDone(s.Snapshot())
		}
	})
}
