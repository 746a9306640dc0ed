package jaegerremotestorageextension

import (
	"context"
	"io"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestOnStandby runs the extension with its default configuration on a
// streaming hot standby and on its primary, side by side: every RPC of the
// Remote Storage API answers the same from both.
func TestOnStandby(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pglocal.NewCluster("pg_basebackup")
	if err != nil {
		pgtest.Unavailable(t, "%v (make deps)", err)
	}
	t.Cleanup(func() {
		if err := c.Stop(); err != nil {
			t.Errorf("stop the servers: %v", err)
		}
	})
	p, err := c.Primary(ctx, "primary", pglocal.ReplicationSettings)
	require.NoError(t, err)
	s, err := c.Standby(ctx, "standby", p)
	require.NoError(t, err)
	primary, err := pgxpool.New(ctx, p.URL)
	require.NoError(t, err)
	defer primary.Close()
	standby, err := pgxpool.New(ctx, s.URL)
	require.NoError(t, err)
	defer standby.Close()

	const name = "otel"
	conn, err := primary.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	conn.Release()

	now := time.Now().UTC().Truncate(time.Millisecond)
	traceID := pcommon.TraceID{0xcc, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}
	td := ptrace.NewTraces()
	for i, svc := range []string{"frontend", "checkout"} {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", svc)
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetTraceID(traceID)
		sp.SetSpanID(pcommon.SpanID{0xdd, 0, 0, 0, 0, 0, 0, byte(i + 1)})
		if i > 0 {
			sp.SetParentSpanID(pcommon.SpanID{0xdd, 0, 0, 0, 0, 0, 0, 1})
		}
		sp.SetName("op-" + svc)
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Minute)))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(-time.Minute + time.Second)))
		sp.Attributes().PutInt("http.status_code", 200)
	}
	var b rows.Batch
	b.AddTraces(td)
	_, err = pgwrite.NewWriter(primary, name).Write(ctx, &b)
	require.NoError(t, err)
	require.NoError(t, pglocal.WaitReplayed(ctx, primary, standby, time.Minute))

	start := func(url string) *grpc.ClientConn {
		f := NewFactory()
		cfg := f.CreateDefaultConfig().(*Config)
		cfg.Endpoint = configopaque.String(url)
		cfg.Schema = name
		cfg.GRPC.NetAddr.Endpoint = freePort(t)
		require.NoError(t, cfg.Validate())
		ext, err := f.Create(ctx, extensiontest.NewNopSettings(metadata.Type), cfg)
		require.NoError(t, err)
		require.NoError(t, ext.Start(ctx, componenttest.NewNopHost()))
		t.Cleanup(func() { require.NoError(t, ext.Shutdown(context.Background())) })
		cc, err := grpc.NewClient(cfg.GRPC.NetAddr.Endpoint, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
		require.NoError(t, err)
		t.Cleanup(func() { _ = cc.Close() })
		return cc
	}
	onPrimary, onStandby := start(p.URL), start(s.URL)

	timestamp := func(b []byte, num protowire.Number, at time.Time) []byte {
		var m []byte
		m = protowire.AppendTag(m, 1, protowire.VarintType)
		m = protowire.AppendVarint(m, uint64(at.Unix()))
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, m)
	}
	str := func(b []byte, num protowire.Number, v string) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendString(b, v)
	}
	msg := func(b []byte, num protowire.Number, m []byte) []byte {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		return protowire.AppendBytes(b, m)
	}
	query := msg(nil, 1, timestamp(timestamp(str(nil, 1, "frontend"), 4, now.Add(-time.Hour)), 5, now.Add(time.Minute)))
	getTraces := msg(nil, 1, msg(nil, 1, traceID[:]))

	call := func(cc *grpc.ClientConn, method string, req []byte) []byte {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		var resp raw
		require.NoError(t, cc.Invoke(callCtx, method, &raw{b: req}, &resp), method)
		return resp.b
	}
	unary := []struct {
		method string
		req    []byte
	}{
		{"/jaeger.storage.v2.TraceReader/GetServices", nil},
		{"/jaeger.storage.v2.TraceReader/GetOperations", str(nil, 1, "checkout")},
		{"/jaeger.storage.v2.TraceReader/FindTraceIDs", query},
		{"/jaeger.storage.v2.DependencyReader/GetDependencies", timestamp(timestamp(nil, 1, now.Add(-time.Hour)), 2, now.Add(time.Minute))},
	}
	for _, u := range unary {
		got := call(onStandby, u.method, u.req)
		assert.NotEmpty(t, got, u.method)
		assert.Equal(t, call(onPrimary, u.method, u.req), got, u.method)
	}
	wantServices := str(str(nil, 1, "checkout"), 1, "frontend")
	assert.Equal(t, wantServices, call(onStandby, unary[0].method, nil), "the standby's services")

	// The streams: the spans of the trace, by id and by search.
	spans := func(cc *grpc.ClientConn, method string, req []byte) []string {
		callCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		st, err := cc.NewStream(callCtx, &grpc.StreamDesc{ServerStreams: true}, method)
		require.NoError(t, err)
		require.NoError(t, st.SendMsg(&raw{b: req}))
		require.NoError(t, st.CloseSend())
		var names []string
		for {
			var m raw
			err := st.RecvMsg(&m)
			if err == io.EOF {
				break
			}
			require.NoError(t, err, method)
			td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(m.b)
			require.NoError(t, err)
			for _, rs := range td.ResourceSpans().All() {
				for _, ss := range rs.ScopeSpans().All() {
					for _, sp := range ss.Spans().All() {
						names = append(names, sp.TraceID().String()+" "+sp.Name())
					}
				}
			}
		}
		sort.Strings(names)
		return names
	}
	want := []string{traceID.String() + " op-checkout", traceID.String() + " op-frontend"}
	for _, st := range []struct {
		method string
		req    []byte
	}{
		{"/jaeger.storage.v2.TraceReader/GetTraces", getTraces},
		{"/jaeger.storage.v2.TraceReader/FindTraces", query},
	} {
		assert.Equal(t, want, spans(onStandby, st.method, st.req), st.method)
		assert.Equal(t, want, spans(onPrimary, st.method, st.req), st.method)
	}
}
