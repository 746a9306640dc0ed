package sharedcomponent

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
)

type counted struct {
	starts, stops int
	startErr      error
}

func (c *counted) Start(context.Context, component.Host) error { c.starts++; return c.startErr }
func (c *counted) Shutdown(context.Context) error              { c.stops++; return nil }

func TestStartOnceStopOnLast(t *testing.T) {
	var m Map[string, *counted]
	ctx, host := context.Background(), componenttest.NewNopHost()
	var sharers []*Sharer[*counted]
	for range 3 {
		s, err := m.LoadOrStore("cfg", func() (*counted, error) { return &counted{}, nil })
		require.NoError(t, err)
		sharers = append(sharers, s.Sharer())
	}
	c := sharers[0].Unwrap()
	for _, h := range sharers {
		require.NoError(t, h.Start(ctx, host))
		require.NoError(t, h.Start(ctx, host), "a second Start of one sharer counts once")
	}
	assert.Equal(t, 1, c.starts)
	require.NoError(t, sharers[0].Shutdown(ctx))
	require.NoError(t, sharers[0].Shutdown(ctx), "a second Shutdown of one sharer counts once")
	require.NoError(t, sharers[1].Shutdown(ctx))
	assert.Zero(t, c.stops, "sharers still running")
	assert.Equal(t, 1, m.Len())
	require.NoError(t, sharers[2].Shutdown(ctx))
	assert.Equal(t, 1, c.stops)
	assert.Zero(t, m.Len(), "forgotten once stopped")
}

func TestStartErrorForEverySharer(t *testing.T) {
	var m Map[string, *counted]
	ctx, host := context.Background(), componenttest.NewNopHost()
	boom := errors.New("boom")
	s, err := m.LoadOrStore("cfg", func() (*counted, error) { return &counted{startErr: boom}, nil })
	require.NoError(t, err)
	a, b := s.Sharer(), s.Sharer()
	assert.ErrorIs(t, a.Start(ctx, host), boom)
	assert.ErrorIs(t, b.Start(ctx, host), boom)
	assert.Equal(t, 1, s.Unwrap().starts)
	assert.Zero(t, m.Len(), "a failed start is forgotten: a later create tries again")
	require.NoError(t, a.Shutdown(ctx))
	require.NoError(t, b.Shutdown(ctx))
	assert.Zero(t, s.Unwrap().stops, "started and failed: nothing to stop")
}

func TestShutdownWithoutStart(t *testing.T) {
	var m Map[string, *counted]
	s, err := m.LoadOrStore("cfg", func() (*counted, error) { return &counted{}, nil })
	require.NoError(t, err)
	a, b := s.Sharer(), s.Sharer()
	require.NoError(t, a.Shutdown(context.Background()))
	require.NoError(t, b.Shutdown(context.Background()))
	assert.Equal(t, 1, s.Unwrap().stops, "never started: shut down once, so that waiters are told")
	assert.Zero(t, m.Len())
}
