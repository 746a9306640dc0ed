package loadgenreceiver // import "github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"

import (
	"time"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// Generator produces the workload without a Collector: each Next call
// returns the next batch of up to batch_size items of one signal. The three
// signals are independent streams over the same users and traces (logs carry
// the spans' ids), so a bench can drain one, two or all three. The content
// depends only on seed, users, events_per_user and the fractions; timestamps
// are offsets from the start time. A Generator is not safe for concurrent
// use; make one per goroutine with NewWorkerGenerator to split the users.
type Generator struct {
	traces  *tracesCursor
	metrics *metricsCursor
	logs    *logsCursor
}

// NewGenerator returns a generator for all of cfg's users with timestamps
// relative to now. It validates cfg.
func NewGenerator(cfg Config) (*Generator, error) {
	return NewWorkerGenerator(cfg, time.Now(), 0)
}

// NewWorkerGenerator returns the generator of one of cfg.Concurrency
// workers: worker w owns users w, w+concurrency, w+2×concurrency... Users'
// activity begins up to an hour before start; a fixed start gives identical
// timestamps too.
func NewWorkerGenerator(cfg Config, start time.Time, worker int) (*Generator, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := newWorkload(cfg, start)
	users := func() userRange {
		return userRange{next: worker, step: cfg.Concurrency, end: cfg.Users}
	}
	return &Generator{
		traces:  newTracesCursor(w, users()),
		metrics: newMetricsCursor(w, users()),
		logs:    newLogsCursor(w, users()),
	}, nil
}

// NextTraces returns the next batch of spans; false once all are out.
func (g *Generator) NextTraces() (ptrace.Traces, bool) {
	td, n := g.traces.next()
	return td, n > 0
}

// NextMetrics returns the next batch of data points; false once all are out.
func (g *Generator) NextMetrics() (pmetric.Metrics, bool) {
	md, n := g.metrics.next()
	return md, n > 0
}

// NextLogs returns the next batch of log records; false once all are out.
func (g *Generator) NextLogs() (plog.Logs, bool) {
	ld, n := g.logs.next()
	return ld, n > 0
}

// Totals is how many spans, data points and log records this generator
// makes in all.
func (g *Generator) Totals() (spans, points, logs int64) {
	return g.traces.total, g.metrics.total, g.logs.total
}

// userRange is the users one generator owns.
type userRange struct {
	next, step, end int
}

func (u *userRange) count() int64 {
	if u.next >= u.end {
		return 0
	}
	return int64((u.end - u.next + u.step - 1) / u.step)
}

func (u *userRange) take() (int, bool) {
	if u.next >= u.end {
		return 0, false
	}
	n := u.next
	u.next += u.step
	return n, true
}

// walker steps through users, their traces, and a signal's items in each
// trace. Each signal has its own walker, so signals can run at different
// speeds; they rebuild the same plans and skeletons from the seed.
type walker struct {
	w      *workload
	r      rng // plan and skeleton streams
	users  userRange
	plan   userPlan
	skel   traceSkel
	inUser bool
	trace  int // current trace in plan
	item   int // next item in the current trace
	items  int // items of this signal in the current trace
}

func newWalker(w *workload, users userRange) walker {
	return walker{w: w, r: newRNG(), users: users}
}

// advance positions the walker at the next item, calling onUser for each new
// user and onTrace for every trace, including traces with no items of this
// signal (metrics accumulate over them). False when the users are done.
func (k *walker) advance(perTrace func(t int) int, onUser, onTrace func()) bool {
	for k.item >= k.items {
		if !k.inUser || k.trace+1 >= len(k.plan.traceSizes) {
			u, ok := k.users.take()
			if !ok {
				k.inUser = false
				return false
			}
			k.w.planUser(k.r, &k.plan, u)
			k.inUser, k.trace, k.item, k.items = true, -1, 0, 0
			onUser()
			continue
		}
		k.trace++
		k.w.skeleton(k.r, &k.plan, k.trace, &k.skel)
		k.item, k.items = 0, perTrace(k.trace)
		onTrace()
	}
	return true
}
