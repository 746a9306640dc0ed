package coord

import (
	"context"
	"net"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"github.com/postgrescopy/postgrescopy/internal/testenv/redistest"
)

// TestSentinelClientRefusesAnotherServer: a new connection of the Sentinel
// client that reaches a server other than the primary a majority of the
// sentinels name (here a dialer sends it to an empty server, as a stale
// address would reach the old primary back empty) is refused, so that no
// request is acknowledged there; dialled to the named primary again, the
// client works. The sentinels' own connections, opened with the same hook,
// are not refused.
func TestSentinelClientRefusesAnotherServer(t *testing.T) {
	const master = "guard"
	ps := redistest.Start(t, "")
	other := redistest.Start(t, "")
	addrs := redistest.StartSentinels(t, ps, 3, redisserver.SentinelOptions{Master: master})
	var stray atomic.Bool
	dialer := &net.Dialer{}
	cl, err := NewClient(Options{Sentinel: &redis.FailoverOptions{
		MasterName: master, SentinelAddrs: addrs, MaxRetries: -1,
		Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
			if stray.Load() && addr == ps.Addr() {
				addr = other.Addr()
			}
			return dialer.DialContext(ctx, network, addr)
		},
	}}, 2)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cl.Close() })
	ctx := context.Background()

	stray.Store(true)
	err = cl.rdb.Set(ctx, "k", "stray", 0).Err()
	require.ErrorIs(t, err, ErrNotNamedPrimary)
	assert.Contains(t, err.Error(), "a new connection reached run id", "the error names both servers")
	t.Log(err)
	n, err := redistest.Client(t, other).Exists(ctx, "k").Result()
	require.NoError(t, err)
	assert.Zero(t, n, "written on a server the sentinels do not name")

	stray.Store(false)
	require.NoError(t, cl.rdb.Set(ctx, "k", "primary", 0).Err())
	v, err := redistest.Client(t, ps).Get(ctx, "k").Result()
	require.NoError(t, err)
	assert.Equal(t, "primary", v)
}
