package request

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	collectorclient "go.opentelemetry.io/collector/client"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
)

// update rewrites the golden encodings of the current version only: the
// files of earlier versions are kept as they were written, forever.
var update = flag.Bool("update", false, "write testdata/encoding-v<current>-*.bin")

func goldenMetrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "m")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("requests")
	g := m.SetEmptyGauge()
	for i := range 3 {
		g.DataPoints().AppendEmpty().SetIntValue(int64(i))
	}
	return md
}

func goldenLogs() plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "l")
	for i := range 2 {
		rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().Body().SetInt(int64(i))
	}
	return ld
}

// goldenCtx is the context a request was queued with: client metadata the
// Collector's encoding keeps.
func goldenCtx() context.Context {
	return collectorclient.NewContext(context.Background(), collectorclient.Info{
		Metadata: collectorclient.NewMetadata(map[string][]string{"tenant": {"a"}})})
}

// golden checks that path, written by the encoding of version v, reads back
// as want: the same keys, chunk marks, pdata and context. With -update the
// current version's file is written first.
func golden[T any](t *testing.T, c *Codec[T], path string, want *Request[T], equal func(a, b T) bool) {
	t.Helper()
	if *update {
		buf, err := NewEncoding(c).Marshal(goldenCtx(), want)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, buf, 0o644))
	}
	buf, err := os.ReadFile(path)
	require.NoError(t, err, "a golden encoding is missing: run go test -run TestReadsEveryEncoding -update once, and commit it")
	ctx, got, err := NewEncoding(c).Unmarshal(buf)
	require.NoError(t, err)
	r := got.(*Request[T])
	require.Len(t, r.Parts(), len(want.Parts()))
	for i, p := range r.Parts() {
		w := want.Parts()[i]
		assert.Equal(t, w.Key, p.Key)
		assert.Equal(t, w.chunk, p.chunk)
		assert.True(t, equal(w.Data, p.Data), "part %d's pdata", i)
	}
	assert.Equal(t, []string{"a"}, collectorclient.FromContext(ctx).Metadata.Get("tenant"))
}

// TestReadsEveryEncoding reads the requests a persistent queue holds in
// every encoding a release ever wrote: a queue kept over an upgrade must
// still be written, under the same keys.
func TestReadsEveryEncoding(t *testing.T) {
	require.Equal(t, 1, encodingVersion, "a new encoding version: keep the v1 files, add golden files of the new one")
	dir := filepath.Join("testdata")
	traces := &Request[ptrace.Traces]{codec: Traces, parts: []*Part[ptrace.Traces]{
		newPart("0123456789abcdef0123456789abcdef", makeTraces(2, "a")),
		newPart("fedcba9876543210fedcba9876543210/1", makeTraces(3, "b")),
	}}
	traces.parts[1].chunk = true
	golden(t, Traces, filepath.Join(dir, "encoding-v1-traces.bin"), traces, func(a, b ptrace.Traces) bool {
		var m ptrace.ProtoMarshaler
		x, _ := m.MarshalTraces(a)
		y, _ := m.MarshalTraces(b)
		return string(x) == string(y)
	})
	metrics := &Request[pmetric.Metrics]{codec: Metrics, parts: []*Part[pmetric.Metrics]{newPart("00000000000000000000000000000001", goldenMetrics())}}
	golden(t, Metrics, filepath.Join(dir, "encoding-v1-metrics.bin"), metrics, func(a, b pmetric.Metrics) bool {
		var m pmetric.ProtoMarshaler
		x, _ := m.MarshalMetrics(a)
		y, _ := m.MarshalMetrics(b)
		return string(x) == string(y)
	})
	logs := &Request[plog.Logs]{codec: Logs, parts: []*Part[plog.Logs]{newPart("00000000000000000000000000000002", goldenLogs())}}
	golden(t, Logs, filepath.Join(dir, "encoding-v1-logs.bin"), logs, func(a, b plog.Logs) bool {
		var m plog.ProtoMarshaler
		x, _ := m.MarshalLogs(a)
		y, _ := m.MarshalLogs(b)
		return string(x) == string(y)
	})
}
