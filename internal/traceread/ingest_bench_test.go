package traceread

import (
	"context"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/schema/spangen"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// BenchmarkServiceIndexIngest is the cost of spans (service_name,
// start_time) INCLUDE (span_name, span_kind) on ingest: each op inserts
// 200,000 generated spans into a fresh schema with the whole index set
// ("with") or the set without it ("without"), alternately in one run.
//
//	flock /work/notes/bench.lock go test -run '^$' -bench BenchmarkServiceIndexIngest -benchtime 3x ./internal/traceread/
func BenchmarkServiceIndexIngest(b *testing.B) {
	ctx := context.Background()
	pool := pgtest.Pool(b)
	shape := spangen.Shape{Traces: 20_000, Spans: 10, Services: 20, Hours: 24}
	for _, with := range []bool{true, false} {
		name := "without"
		if with {
			name = "with"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := pgtest.Schema(b, pool)
				conn, err := pool.Acquire(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := schema.Migrate(ctx, conn.Conn(), s); err != nil {
					b.Fatal(err)
				}
				if err := schema.SetIndexes(ctx, conn.Conn(), s, true); err != nil {
					b.Fatal(err)
				}
				conn.Release()
				if !with {
					if _, err := pool.Exec(ctx, "DROP INDEX "+schema.Qualified(s, "spans_service_start_idx")); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := schema.Maintain(ctx, pool, s, schema.Partitioning{Interval: 24 * time.Hour, Premake: 1}); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if err := spangen.Generate(ctx, pool, s, shape); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/float64(shape.Traces*shape.Spans), "µs/span")
		})
	}
}
