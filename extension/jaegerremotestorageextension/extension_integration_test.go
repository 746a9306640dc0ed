package jaegerremotestorageextension

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

type raw struct{ b []byte }

type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.(*raw).b)}, nil
}
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*raw).b = data.Materialize()
	return nil
}

func freePort(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return "127.0.0.1:" + strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// TestLifecycle starts the extension on a real PostgreSQL, lists the
// services of a schema over gRPC, and shuts down: safe without start, safe
// twice, and nothing left behind (goleak).
func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	conn.Release()
	_, err = pool.Exec(ctx, `INSERT INTO `+schema.Qualified(name, "spans_rows")+` (start_time, start_time_frac_ns, end_time, duration_ns,
		trace_id, span_id, flags, service_name, span_name, span_kind, status_code, span_attributes, dropped_attributes_count,
		dropped_events_count, dropped_links_count, resource_attributes, scope_attributes, resource_dropped_attributes_count,
		scope_dropped_attributes_count) VALUES (now(), 0, now(), 0, gen_random_uuid(), 1, 0, 'checkout', 'GET /', 'Server', 'Unset',
		'{}', 0, 0, 0, '{"service.name":"checkout"}', '{}', 0, 0)`)
	require.NoError(t, err)

	f := NewFactory()
	cfg := f.CreateDefaultConfig().(*Config)
	cfg.Endpoint = configopaque.String(pgtest.URL())
	cfg.Schema = name
	cfg.GRPC.NetAddr.Endpoint = freePort(t)
	require.NoError(t, cfg.Validate())

	ext, err := f.Create(ctx, extensiontest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, ext.Shutdown(ctx), "shutdown before start")

	ext, err = f.Create(ctx, extensiontest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, ext.Start(ctx, componenttest.NewNopHost()))

	cc, err := grpc.NewClient(cfg.GRPC.NetAddr.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	require.NoError(t, err)
	callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var resp raw
	require.NoError(t, cc.Invoke(callCtx, "/jaeger.storage.v2.TraceReader/GetServices", &raw{}, &resp))
	want := protowire.AppendString(protowire.AppendTag(nil, 1, protowire.BytesType), "checkout")
	assert.Equal(t, want, resp.b)
	require.NoError(t, cc.Close())

	require.NoError(t, ext.Shutdown(ctx))
	require.NoError(t, ext.Shutdown(ctx), "shutdown twice")

	// The port is free again.
	l, err := net.Listen("tcp", cfg.GRPC.NetAddr.Endpoint)
	require.NoError(t, err)
	require.NoError(t, l.Close())
}

// TestStartFailsOnBusyPort: a port another process holds fails the start,
// and leaves no pool open.
func TestStartFailsOnBusyPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	cfg := createDefaultConfig()
	cfg.Endpoint = configopaque.String(pgtest.URL())
	cfg.GRPC.NetAddr.Endpoint = l.Addr().String()
	ext := newStorage(cfg, extensiontest.NewNopSettings(metadata.Type))
	require.ErrorContains(t, ext.Start(context.Background(), componenttest.NewNopHost()), "listen on")
	require.NoError(t, ext.Shutdown(context.Background()))
}
