package flush

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Admission keeps one replica's signals about equally behind when PostgreSQL
// is the bottleneck. Each signal drains its own stream with its own workers,
// and a span costs PostgreSQL several times what a log record or a metric
// point does: left alone, the cheap signals are written as they come while
// the spans' backlog grows, and the spans are written last, alone. Before a
// write, a worker enters with the time of its batch's oldest entry; it waits
// while another batch, in flight or waiting, holds entries older than its
// own by more than the bound. The oldest batch never waits, so every wait
// ends when a write in flight ends. Without a backlog every batch is younger
// than the bound apart and nothing waits. A write in flight for longer than
// stale (held up by a lock, or a dead server's timeout) no longer holds
// anything back: one stuck table does not stop the other signals.
type Admission struct {
	bound, stale time.Duration

	mu      sync.Mutex
	tickets map[*ticket]struct{} // in flight and waiting
}

type ticket struct {
	oldest   time.Time
	inFlight bool
	admitted time.Time     // when it went in
	wake     chan struct{} // closed when it may go in
}

// recheck is how often a waiting batch looks whether a write in flight has
// gone stale.
const recheck = 100 * time.Millisecond

// NewAdmission returns an admission that lets a batch wait while another,
// waiting or in flight for less than stale, is older than it by more than
// bound.
func NewAdmission(bound, stale time.Duration) *Admission {
	return &Admission{bound: bound, stale: stale, tickets: map[*ticket]struct{}{}}
}

// Enter waits until a batch whose oldest entry was added at oldest may be
// written, and returns the function that ends its write. It returns ctx's
// error if ctx ends first. A nil Admission admits at once, and so does a
// batch with no entry time (zero oldest), which then holds nothing back.
func (a *Admission) Enter(ctx context.Context, oldest time.Time) (leave func(), err error) {
	if a == nil || oldest.IsZero() {
		return func() {}, nil
	}
	t := &ticket{oldest: oldest, wake: make(chan struct{})}
	a.mu.Lock()
	a.tickets[t] = struct{}{}
	a.admit()
	a.mu.Unlock()
	select {
	case <-t.wake: // admitted at once: no backlog ahead of it
	default:
		if err := a.wait(ctx, t); err != nil {
			return nil, err
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			a.mu.Lock()
			delete(a.tickets, t)
			a.admit()
			a.mu.Unlock()
		})
	}, nil
}

// wait blocks until t is admitted, looking every recheck whether a write in
// flight went stale, or until ctx ends.
func (a *Admission) wait(ctx context.Context, t *ticket) error {
	tick := time.NewTicker(recheck)
	defer tick.Stop()
	for {
		select {
		case <-t.wake:
			return nil
		case <-tick.C:
			a.mu.Lock()
			a.admit()
			a.mu.Unlock()
		case <-ctx.Done():
			a.mu.Lock()
			defer a.mu.Unlock()
			if t.inFlight {
				return nil // admitted meanwhile: go on
			}
			delete(a.tickets, t)
			a.admit()
			return ctx.Err()
		}
	}
}

// admit lets in every waiting ticket within the bound of the oldest one
// that holds others back: waiting, or in flight for less than stale. Called
// with mu held.
func (a *Admission) admit() {
	now := time.Now()
	var floor time.Time
	for t := range a.tickets {
		if t.inFlight && now.Sub(t.admitted) >= a.stale {
			continue
		}
		if floor.IsZero() || t.oldest.Before(floor) {
			floor = t.oldest
		}
	}
	for t := range a.tickets {
		if !t.inFlight && (floor.IsZero() || !t.oldest.After(floor.Add(a.bound))) {
			t.inFlight, t.admitted = true, now
			close(t.wake)
		}
	}
}

// Waiting is how many batches wait to go in.
func (a *Admission) Waiting() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	n := 0
	for t := range a.tickets {
		if !t.inFlight {
			n++
		}
	}
	return n
}

// entryTime is when a stream entry was added: the milliseconds of its id
// (Redis stream ids are "<ms>-<seq>"). ok is false for an id of another form.
func entryTime(id string) (time.Time, bool) {
	ms, _, _ := strings.Cut(id, "-")
	n, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(n), true
}

// oldestEntry is the time of the oldest of entries, zero when none has a
// stream id's time.
func oldestEntry(entries []keyedEntry) time.Time {
	var oldest time.Time
	for _, e := range entries {
		if t, ok := entryTime(e.ID); ok && (oldest.IsZero() || t.Before(oldest)) {
			oldest = t
		}
	}
	return oldest
}
