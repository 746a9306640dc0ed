package postgrescopyexporter // import "github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter"

import (
	"context"
	"sync"

	"go.opentelemetry.io/collector/component"
)

// The Collector builds one exporter per signal from the same *Config; they
// share one client (one pool) keyed by that pointer, with the semantics of
// core's internal/sharedcomponent: started once, its start error returned to
// every sharer, shut down when the last started sharer shuts down.
var (
	sharedMu sync.Mutex
	shared   = map[*Config]*sharedClient{}
)

type sharedClient struct {
	mu       sync.Mutex
	c        *client
	started  bool
	startErr error
	refs     int
}

// acquireClient returns the shared client for cfg, creating it (without I/O)
// on first use.
func acquireClient(cfg *Config, set component.TelemetrySettings) (*sharedClient, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if s, ok := shared[cfg]; ok {
		return s, nil
	}
	c, err := newClient(cfg, withoutSignal(set))
	if err != nil {
		return nil, err
	}
	s := &sharedClient{c: c}
	shared[cfg] = s
	return s, nil
}

func (s *sharedClient) start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		s.started = true
		s.startErr = s.c.start(ctx)
	}
	if s.startErr == nil {
		s.refs++
	}
	return s.startErr
}

// release is called once per sharer that started successfully.
func (s *sharedClient) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refs--
	if s.refs > 0 {
		return
	}
	s.c.shutdown()
	sharedMu.Lock()
	for k, v := range shared {
		if v == s {
			delete(shared, k)
		}
	}
	sharedMu.Unlock()
}

// forget drops a client whose start failed, so that a later start (for
// example after a config reload) tries again.
func (s *sharedClient) forget() {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	for k, v := range shared {
		if v == s {
			delete(shared, k)
		}
	}
}
