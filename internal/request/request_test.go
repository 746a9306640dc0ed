package request

import (
	"context"
	"encoding/hex"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectorclient "go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exporterhelper/xexporterhelper"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

var (
	sizeItems = exporterhelper.RequestSizerTypeItems
	sizeBytes = exporterhelper.RequestSizerTypeBytes
)

// spanIndexes lists the "i" attribute of every span of r, part by part.
func spanIndexes(t *testing.T, r xexporterhelper.Request) [][]int64 {
	var out [][]int64
	for _, p := range r.(*Request[ptrace.Traces]).parts {
		var ids []int64
		for _, rs := range p.Data.ResourceSpans().All() {
			for _, ss := range rs.ScopeSpans().All() {
				for _, s := range ss.Spans().All() {
					v, ok := s.Attributes().Get("i")
					require.True(t, ok)
					ids = append(ids, v.Int())
				}
			}
		}
		out = append(out, ids)
	}
	return out
}

func keysOf(rs []xexporterhelper.Request) [][]string {
	out := make([][]string, len(rs))
	for i, r := range rs {
		out[i] = r.(*Request[ptrace.Traces]).keys()
	}
	return out
}

func seq(from, to int) []int64 {
	var s []int64
	for i := from; i < to; i++ {
		s = append(s, int64(i))
	}
	return s
}

func TestNewKeyIsRandom128Bits(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		k := NewKey()
		b, err := hex.DecodeString(k)
		require.NoError(t, err)
		require.Len(t, b, 16)
		require.False(t, seen[k])
		seen[k] = true
	}
	// Identical content, two requests, two keys.
	a, b := New(Traces, makeTraces(1, "s")), New(Traces, makeTraces(1, "s"))
	assert.NotEqual(t, a.parts[0].Key, b.parts[0].Key)
}

func TestMergeSplitKeepsPartsWhole(t *testing.T) {
	ctx := context.Background()
	a, b := New(Traces, makeTraces(3, "a")), New(Traces, makeTraces(4, "b"))
	ka, kb := a.parts[0].Key, b.parts[0].Key

	out, err := a.MergeSplit(ctx, 10, sizeItems, b)
	require.NoError(t, err)
	require.Len(t, out, 1)
	assert.Equal(t, [][]string{{ka, kb}}, keysOf(out))
	assert.Equal(t, 7, out[0].ItemsCount())
	assert.Equal(t, tracesSizer.TracesSize(makeTraces(3, "a"))+tracesSizer.TracesSize(makeTraces(4, "b")), out[0].BytesSize())

	// What does not fit next to the batch starts the next one, whole.
	c := New(Traces, makeTraces(6, "c"))
	out, err = out[0].MergeSplit(ctx, 10, sizeItems, c)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{ka, kb}, {c.parts[0].Key}}, keysOf(out))
	assert.Equal(t, [][]int64{seq(0, 6)}, spanIndexes(t, out[1]))

	// No limit: one request.
	out, err = New(Traces, makeTraces(3, "a")).MergeSplit(ctx, 0, sizeItems, New(Traces, makeTraces(30, "b")))
	require.NoError(t, err)
	require.Len(t, out, 1)
	assert.Equal(t, 33, out[0].ItemsCount())
}

// TestMergeSplitCutsOversizedPartDeterministically: a part larger than the
// batch is cut at offsets from its own start with derived keys, whether it
// arrives alone or behind another request: a replay splits the same way.
func TestMergeSplitCutsOversizedPartDeterministically(t *testing.T) {
	ctx := context.Background()
	big := func() *Request[ptrace.Traces] {
		r := New(Traces, makeTraces(25, "big"))
		r.parts[0].Key = "k"
		return r
	}
	alone, err := big().MergeSplit(ctx, 10, sizeItems, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"k/0"}, {"k/1"}, {"k/2"}}, keysOf(alone))
	assert.Equal(t, [][]int64{seq(0, 10)}, spanIndexes(t, alone[0]))
	assert.Equal(t, [][]int64{seq(10, 20)}, spanIndexes(t, alone[1]))
	assert.Equal(t, [][]int64{seq(20, 25)}, spanIndexes(t, alone[2]))

	small := New(Traces, makeTraces(3, "small"))
	behind, err := small.MergeSplit(ctx, 10, sizeItems, big())
	require.NoError(t, err)
	assert.Equal(t, [][]string{{small.parts[0].Key}, {"k/0"}, {"k/1"}, {"k/2"}}, keysOf(behind))
	for i := range alone {
		assert.Equal(t, spanIndexes(t, alone[i]), spanIndexes(t, behind[i+1]))
	}

	// The last chunk takes neighbours after it; a chunk is never cut again.
	next := New(Traces, makeTraces(4, "next"))
	out, err := behind[3].MergeSplit(ctx, 10, sizeItems, next)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"k/2", next.parts[0].Key}}, keysOf(out))
	chunk := alone[0].(*Request[ptrace.Traces])
	out, err = chunk.MergeSplit(ctx, 4, sizeItems, nil)
	require.NoError(t, err)
	assert.Equal(t, [][]string{{"k/0"}}, keysOf(out), "a chunk keeps its rows under its key")
}

func TestMergeSplitInBytes(t *testing.T) {
	ctx := context.Background()
	r := New(Traces, makeTraces(500, "bytes"))
	r.parts[0].Key = "k"
	total := r.BytesSize()
	maxSize := total / 7
	out, err := r.MergeSplit(ctx, maxSize, sizeBytes, nil)
	require.NoError(t, err)
	require.Greater(t, len(out), 6)
	var all []int64
	for i, o := range out {
		assert.LessOrEqual(t, o.BytesSize(), maxSize, "chunk %d", i)
		// Cut in the same place as a fresh count of its size says.
		assert.Equal(t, tracesSizer.TracesSize(o.(*Request[ptrace.Traces]).parts[0].Data), o.BytesSize())
		all = append(all, spanIndexes(t, o)[0]...)
	}
	assert.Equal(t, seq(0, 500), all, "every span once, in order")
}

func TestMergeSplitMetricsKeepsMetricShape(t *testing.T) {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "m")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("requests")
	m.SetUnit("1")
	sum := m.SetEmptySum()
	sum.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
	sum.SetIsMonotonic(true)
	for i := range 25 {
		sum.DataPoints().AppendEmpty().SetIntValue(int64(i))
	}
	r := New(Metrics, md)
	key := r.parts[0].Key
	out, err := r.MergeSplit(context.Background(), 10, sizeItems, nil)
	require.NoError(t, err)
	require.Len(t, out, 3)
	next := int64(0)
	for i, o := range out {
		p := o.(*Request[pmetric.Metrics]).parts[0]
		assert.Equal(t, key+"/"+strconv.Itoa(i), p.Key)
		rm := p.Data.ResourceMetrics().At(0)
		v, _ := rm.Resource().Attributes().Get("service.name")
		assert.Equal(t, "m", v.Str())
		got := rm.ScopeMetrics().At(0).Metrics().At(0)
		assert.Equal(t, "requests", got.Name())
		assert.Equal(t, "1", got.Unit())
		assert.Equal(t, pmetric.AggregationTemporalityCumulative, got.Sum().AggregationTemporality())
		assert.True(t, got.Sum().IsMonotonic())
		for _, dp := range got.Sum().DataPoints().All() {
			assert.Equal(t, next, dp.IntValue())
			next++
		}
	}
	assert.EqualValues(t, 25, next)
}

func TestRequestEncodingRoundTrip(t *testing.T) {
	ctx := collectorclient.NewContext(context.Background(), collectorclient.Info{Metadata: collectorclient.NewMetadata(map[string][]string{"tenant": {"a"}})})
	r := New(Traces, makeTraces(5, "a"))
	merged, err := r.MergeSplit(ctx, 0, sizeItems, New(Traces, makeTraces(3, "b")))
	require.NoError(t, err)
	in := merged[0].(*Request[ptrace.Traces])
	in.parts[1].chunk = true

	enc := Encoding[ptrace.Traces]{codec: Traces}
	buf, err := enc.Marshal(ctx, in)
	require.NoError(t, err)
	gotCtx, got, err := enc.Unmarshal(buf)
	require.NoError(t, err)
	out := got.(*Request[ptrace.Traces])
	require.Len(t, out.parts, 2)
	for i := range in.parts {
		assert.Equal(t, in.parts[i].Key, out.parts[i].Key)
		assert.Equal(t, in.parts[i].chunk, out.parts[i].chunk)
		assert.Equal(t, in.parts[i].Data, out.parts[i].Data)
	}
	assert.Equal(t, []string{"a"}, collectorclient.FromContext(gotCtx).Metadata.Get("tenant"))

	for _, bad := range [][]byte{nil, {9}, buf[:len(buf)-1], append(append([]byte{}, buf...), 0)} {
		_, _, err := enc.Unmarshal(bad)
		assert.ErrorIs(t, err, ErrEncoding)
	}
}

// TestSplitFitsEveryPieceInBytes: Split cuts pdata into pieces whose
// protobuf size is at most the bound, every span kept once, in order; a
// request built with its measured size reports that size.
func TestSplitFitsEveryPieceInBytes(t *testing.T) {
	td := makeTraces(500, "svc")
	total := Size(Traces, td, sizeBytes)
	require.Equal(t, (&ptrace.ProtoMarshaler{}).TracesSize(td), total)
	require.Equal(t, 500, Size(Traces, td, sizeItems))
	limit := total / 7
	pieces := Split(Traces, td, limit, sizeBytes)
	require.GreaterOrEqual(t, len(pieces), 7)
	var got []int64
	for _, p := range pieces {
		require.LessOrEqual(t, Size(Traces, p, sizeBytes), limit)
		r := New(Traces, p)
		got = append(got, spanIndexes(t, r)[0]...)
	}
	require.Equal(t, seq(0, 500), got)

	r := NewSized(Traces, makeTraces(3, "svc"), sizeBytes, 12345)
	require.Equal(t, 12345, r.BytesSize())
	require.Equal(t, 3, r.ItemsCount())
}
