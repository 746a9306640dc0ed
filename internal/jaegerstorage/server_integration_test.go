package jaegerstorage_test

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/postgrescopy/postgrescopy/internal/jaegerstorage"
	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// raw is a message the test encodes and decodes itself, with protowire, as
// a client generated from jaeger-idl would put it on the wire.
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

func str(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func msg(b []byte, num protowire.Number, m []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, m)
}

// ts is a Timestamp as gogoproto's stdtime writes it (time.Time{} too).
func ts(t time.Time) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(t.Unix()))
	if t.Nanosecond() != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(t.Nanosecond()))
	}
	return b
}

func dur(d time.Duration) []byte {
	var b []byte
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(d/time.Second))
	b = protowire.AppendTag(b, 2, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(d%time.Second))
}

// decode splits a message into its fields: for each number, the raw values.
func decode(t *testing.T, b []byte) map[protowire.Number][][]byte {
	t.Helper()
	out := map[protowire.Number][][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		require.GreaterOrEqual(t, n, 0)
		b = b[n:]
		var v []byte
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			var x uint64
			x, n = protowire.ConsumeVarint(b)
			v = protowire.AppendVarint(nil, x)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
			v = b[:n]
		}
		require.GreaterOrEqual(t, n, 0)
		b = b[n:]
		out[num] = append(out[num], v)
	}
	return out
}

func varint(t *testing.T, b []byte) uint64 {
	x, n := protowire.ConsumeVarint(b)
	require.Equal(t, len(b), n)
	return x
}

func tid(n byte) pcommon.TraceID {
	return pcommon.TraceID{0xcc, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, n}
}

// span adds a span of service to td.
func span(td ptrace.Traces, service, name string, kind ptrace.SpanKind, trace, id, parent byte, start time.Time, d time.Duration) {
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", service)
	s := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	s.SetTraceID(tid(trace))
	s.SetSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, id})
	if parent != 0 {
		s.SetParentSpanID(pcommon.SpanID{1, 2, 3, 4, 5, 6, 7, parent})
	}
	s.SetName(name)
	s.SetKind(kind)
	s.SetStartTimestamp(pcommon.NewTimestampFromTime(start))
	s.SetEndTimestamp(pcommon.NewTimestampFromTime(start.Add(d)))
	s.Attributes().PutInt("http.status_code", 200)
}

// TestServer serves the API from a real PostgreSQL and calls every method
// over gRPC with requests encoded as Jaeger's client encodes them.
func TestServer(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	require.NoError(t, err)
	require.NoError(t, schema.SetIndexes(ctx, conn.Conn(), name, true))
	conn.Release()

	now := time.Now().UTC().Truncate(time.Microsecond)
	td := ptrace.NewTraces()
	span(td, "frontend", "GET /", ptrace.SpanKindServer, 1, 1, 0, now.Add(-time.Minute), 50*time.Millisecond)
	span(td, "backend", "query", ptrace.SpanKindClient, 1, 2, 1, now.Add(-time.Minute), 20*time.Millisecond)
	span(td, "frontend", "GET /", ptrace.SpanKindServer, 2, 1, 0, now.Add(-2*time.Minute), 5*time.Millisecond)
	var b rows.Batch
	b.AddTraces(td)
	_, err = pgwrite.NewWriter(pool, name).Write(ctx, &b)
	require.NoError(t, err)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	gs := grpc.NewServer(jaegerstorage.ServerOption())
	jaegerstorage.NewServer(traceread.New(pool, name, traceread.Limits{MaxTraceIDs: 2}), 10*time.Second).Register(gs)
	done := make(chan error, 1)
	go func() { done <- gs.Serve(lis) }()
	defer func() {
		gs.Stop()
		require.NoError(t, <-done)
	}()
	cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})))
	require.NoError(t, err)
	defer cc.Close()

	call := func(method string, req []byte) ([]byte, error) {
		var resp raw
		err := cc.Invoke(ctx, "/jaeger.storage.v2."+method, &raw{req}, &resp)
		return resp.b, err
	}
	stream := func(method string, req []byte) ([]ptrace.Traces, error) {
		st, err := cc.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, "/jaeger.storage.v2.TraceReader/"+method)
		require.NoError(t, err)
		require.NoError(t, st.SendMsg(&raw{req}))
		require.NoError(t, st.CloseSend())
		var out []ptrace.Traces
		for {
			var m raw
			err := st.RecvMsg(&m)
			if err == io.EOF {
				return out, nil
			}
			if err != nil {
				return out, err
			}
			got, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(m.b)
			require.NoError(t, err)
			out = append(out, got)
		}
	}

	resp, err := call("TraceReader/GetServices", nil)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{[]byte("backend"), []byte("frontend")}, decode(t, resp)[1])

	resp, err = call("TraceReader/GetOperations", str(nil, 1, "frontend"))
	require.NoError(t, err)
	ops := decode(t, resp)[1]
	require.Len(t, ops, 1)
	op := decode(t, ops[0])
	assert.Equal(t, "GET /", string(op[1][0]))
	assert.Equal(t, "server", string(op[2][0]))

	// GetTraces with zero bounds (time.Time{} as gogoproto sends it).
	id := tid(1)
	params := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), id[:])
	params = msg(msg(params, 2, ts(time.Time{})), 3, ts(time.Time{}))
	got, err := stream("GetTraces", msg(nil, 1, params))
	require.NoError(t, err)
	require.Len(t, got, 1)
	assert.Equal(t, 2, got[0].SpanCount())
	assert.Equal(t, id, got[0].ResourceSpans().At(0).ScopeSpans().At(0).Spans().At(0).TraceID())

	// Three ids is over the limit of two.
	var many []byte
	for i := range 3 {
		one := tid(byte(i + 1))
		many = msg(many, 1, protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), one[:]))
	}
	_, err = stream("GetTraces", many)
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	// A search by service, tag, duration and time range.
	var q []byte
	q = str(q, 1, "frontend")
	q = msg(q, 3, msg(str(nil, 1, "http.status_code"), 2, str(nil, 1, "200")))
	q = msg(q, 4, ts(now.Add(-time.Hour)))
	q = msg(q, 5, ts(now))
	q = msg(q, 6, dur(time.Millisecond))
	q = msg(q, 7, dur(time.Second))
	q = protowire.AppendVarint(protowire.AppendTag(q, 8, protowire.VarintType), 10)
	resp, err = call("TraceReader/FindTraceIDs", msg(nil, 1, q))
	require.NoError(t, err)
	found := decode(t, resp)[1]
	require.Len(t, found, 2)
	first := decode(t, found[0])
	assert.Equal(t, tid(1), pcommon.TraceID(first[1][0]), "the latest first")
	start := decode(t, first[2][0])
	assert.Equal(t, uint64(now.Add(-time.Minute).Unix()), varint(t, start[1][0]))

	got, err = stream("FindTraces", msg(nil, 1, q))
	require.NoError(t, err)
	require.Len(t, got, 2)
	assert.Equal(t, 2, got[0].SpanCount(), "the whole trace, the backend span too")
	assert.Equal(t, 1, got[1].SpanCount())

	// A search by an array value is refused, not ignored.
	bad := msg(nil, 3, msg(str(nil, 1, "k"), 2, msg(nil, 5, nil)))
	_, err = call("TraceReader/FindTraceIDs", msg(nil, 1, bad))
	assert.Equal(t, codes.InvalidArgument, status.Code(err), "%v", err)

	resp, err = call("DependencyReader/GetDependencies", msg(msg(nil, 1, ts(now.Add(-time.Hour))), 2, ts(now)))
	require.NoError(t, err)
	deps := decode(t, resp)[1]
	require.Len(t, deps, 1)
	dep := decode(t, deps[0])
	assert.Equal(t, "frontend", string(dep[1][0]))
	assert.Equal(t, "backend", string(dep[2][0]))
	assert.Equal(t, uint64(1), varint(t, dep[3][0]))

	// FindSpans and FindTraceSummaries are not served.
	_, err = stream("FindSpans", nil)
	assert.Equal(t, codes.Unimplemented, status.Code(err), "%v", err)
}
