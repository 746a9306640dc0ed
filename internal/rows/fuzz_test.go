package rows_test

import (
	"testing"

	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/internal/rows"
)

// The fuzz targets feed OTLP protobuf (what a receiver hands the exporter)
// through the conversion, once without limits and once with small ones that
// the corpus reaches, and require every row to pass checkBatch: what
// PostgreSQL's input functions would check. Seeds are in testdata/fuzz;
// `make fuzz` runs each target for FUZZTIME.

var fuzzLimits = []rows.Limits{{}, {MaxValue: 200, MaxRow: 2048}}

func fuzzBatch(t *testing.T, add func(*rows.Batch)) {
	var b rows.Batch
	for _, lim := range fuzzLimits {
		b.Reset()
		b.SetLimits(lim)
		add(&b)
		if err := checkBatch(&b, lim); err != nil {
			t.Fatalf("limits %+v: %v", lim, err)
		}
	}
}

func FuzzAddTraces(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		td, err := (&ptrace.ProtoUnmarshaler{}).UnmarshalTraces(data)
		if err != nil {
			return
		}
		fuzzBatch(t, func(b *rows.Batch) { b.AddTraces(td) })
	})
}

func FuzzAddLogs(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		ld, err := (&plog.ProtoUnmarshaler{}).UnmarshalLogs(data)
		if err != nil {
			return
		}
		fuzzBatch(t, func(b *rows.Batch) { b.AddLogs(ld) })
	})
}

func FuzzAddMetrics(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		md, err := (&pmetric.ProtoUnmarshaler{}).UnmarshalMetrics(data)
		if err != nil {
			return
		}
		fuzzBatch(t, func(b *rows.Batch) { b.AddMetrics(md) })
	})
}
