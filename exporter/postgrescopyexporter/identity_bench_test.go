package postgrescopyexporter

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// BenchmarkDirectPushParts writes batches of 5,000 spans made of 1 to 500
// requests: what a ledger key per request costs a direct write.
func BenchmarkDirectPushParts(b *testing.B) {
	const spans = 5000
	for _, parts := range []int{1, 10, 100, 500} {
		b.Run(fmt.Sprintf("parts=%d", parts), func(b *testing.B) {
			pool := pgtest.Pool(b)
			cfg := defaultConfig()
			cfg.Endpoint = configopaque.String(pgtest.URL())
			cfg.Schema = pgtest.Schema(b, pool)
			cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
			ctx := context.Background()
			e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
			require.NoError(b, err)
			require.NoError(b, e.start(ctx, componenttest.NewNopHost()))
			b.Cleanup(func() { require.NoError(b, e.shutdown(ctx)) })
			push := pusher(e, request.Traces)
			data := make([]ptrace.Traces, parts)
			for i := range data {
				data[i] = makeTraces(spans/parts, fmt.Sprintf("svc-%d", i))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				r := request.New(request.Traces, data[0])
				for _, d := range data[1:] {
					if _, err := r.MergeSplit(ctx, 0, exporterhelper.RequestSizerTypeItems, request.New(request.Traces, d)); err != nil {
						b.Fatal(err)
					}
				}
				if err := push(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
