package sharedcomponent

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/collector/component"
)

// Component is what is shared.
type Component interface {
	Start(ctx context.Context, host component.Host) error
	Shutdown(ctx context.Context) error
}

// Map holds the shared components by key (the *Config the Collector passes
// to every signal's create).
type Map[K comparable, V Component] struct {
	mu sync.Mutex
	m  map[K]*Shared[V]
}

// LoadOrStore returns key's shared component, creating it (without I/O) with
// create on first use.
func (m *Map[K, V]) LoadOrStore(key K, create func() (V, error)) (*Shared[V], error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s, ok := m.m[key]; ok {
		return s, nil
	}
	v, err := create()
	if err != nil {
		return nil, err
	}
	if m.m == nil {
		m.m = map[K]*Shared[V]{}
	}
	s := &Shared[V]{value: v}
	s.remove = func() {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.m[key] == s {
			delete(m.m, key)
		}
	}
	m.m[key] = s
	return s, nil
}

// Len is the number of components held, for tests.
func (m *Map[K, V]) Len() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.m)
}

// Shared is one shared component.
type Shared[V Component] struct {
	value  V
	remove func()

	mu       sync.Mutex
	started  bool
	stopped  bool
	startErr error
	refs     int // sharers started and not yet shut down
}

// Unwrap returns the shared component.
func (s *Shared[V]) Unwrap() V { return s.value }

// Sharer returns a handle for one sharer: its Start and Shutdown count once
// each, however often they are called.
func (s *Shared[V]) Sharer() *Sharer[V] { return &Sharer[V]{s: s} }

func (s *Shared[V]) start(ctx context.Context, host component.Host) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.startErr = s.value.Start(ctx, host)
		if s.startErr != nil {
			// A later create (a config reload) makes a new one.
			s.remove()
		}
	}
	if s.startErr == nil {
		s.refs++
	}
	return s.startErr
}

// release is one started sharer's Shutdown; the last one shuts s down.
func (s *Shared[V]) release(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs--
	if s.refs > 0 || s.stopped {
		return nil
	}
	s.stopped = true
	s.remove()
	return s.value.Shutdown(ctx)
}

// abandon is the Shutdown of a sharer that never started: when no sharer
// started either, the component is shut down (it is safe without Start),
// so that what waits on its end is told.
func (s *Shared[V]) abandon(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return nil
	}
	s.stopped = true
	s.remove()
	return s.value.Shutdown(ctx)
}

// Sharer is one sharer's handle on a shared component.
type Sharer[V Component] struct {
	s *Shared[V]
	// mu orders Start and Shutdown; started is read without it, by every
	// push (Started).
	mu      sync.Mutex
	started atomic.Bool
}

// Unwrap returns the shared component.
func (h *Sharer[V]) Unwrap() V { return h.s.value }

// Start starts the shared component on the first sharer's call, and returns
// its start error to every sharer.
func (h *Sharer[V]) Start(ctx context.Context, host component.Host) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.started.Load() {
		return nil
	}
	if err := h.s.start(ctx, host); err != nil {
		return err
	}
	h.started.Store(true)
	return nil
}

// Shutdown shuts the shared component down when h is the last started
// sharer. It is safe without Start and safe twice.
func (h *Sharer[V]) Shutdown(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.started.Load() {
		return h.s.abandon(ctx)
	}
	h.started.Store(false)
	return h.s.release(ctx)
}

// Started reports whether this sharer started (and did not shut down yet),
// without a lock.
func (h *Sharer[V]) Started() bool { return h.started.Load() }
