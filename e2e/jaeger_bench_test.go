package e2e

import (
	"context"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/schema/spangen"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
)

// BenchmarkJaegerQuery measures Jaeger's HTTP query API over the
// distribution's jaeger_remote_storage extension on a million spans
// (100,000 traces of 10 spans over the last 24 hours, 20 services,
// generated in the database in daily partitions): a trace by id, a search
// by service over the last hour (20 traces), the services, and the
// dependencies of the last hour. Each op is one HTTP request, answered in
// full. Run it alone, under the bench lock:
//
//	flock /work/notes/bench.lock go test -run '^$' -bench BenchmarkJaegerQuery -benchtime 200x ./e2e/
func BenchmarkJaegerQuery(b *testing.B) {
	jaeger := jaegerBinary(b)
	ctx := context.Background()
	pool := pgtest.Pool(b)
	name := pgtest.Schema(b, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := schema.Migrate(ctx, conn.Conn(), name); err != nil {
		b.Fatal(err)
	}
	if err := schema.SetIndexes(ctx, conn.Conn(), name, true); err != nil {
		b.Fatal(err)
	}
	conn.Release()
	if _, err := schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: 24 * time.Hour, Premake: 1}); err != nil {
		b.Fatal(err)
	}
	shape := spangen.Shape{Traces: 100_000, Spans: 10, Services: 20, Hours: 24}
	began := time.Now()
	if err := spangen.Generate(ctx, pool, name, shape); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d spans generated in %v", shape.Traces*shape.Spans, time.Since(began).Round(time.Millisecond))

	ep := newEndpoints(b)
	free := ports.FreeT(b, 3)
	storageAddr := "127.0.0.1:" + strconv.Itoa(free[0])
	queryHTTP := "127.0.0.1:" + strconv.Itoa(free[1])
	cfg := collectorConfig(ep, map[string]any{"debug": map[string]any{}}, "warn")
	cfg["extensions"].(map[string]any)["jaeger_remote_storage"] = map[string]any{
		"endpoint": pgtest.URL(), "schema": name, "grpc": map[string]any{"endpoint": storageAddr},
	}
	svc := cfg["service"].(map[string]any)
	svc["extensions"] = append(svc["extensions"].([]string), "jaeger_remote_storage")
	c := startCollector(b, ep, cfg)
	j := startBinary(b, jaeger, endpoints{}, writeConfig(b, b.TempDir(), jaegerConfig(storageAddr, queryHTTP, "127.0.0.1:"+strconv.Itoa(free[2]))))
	waitPort(b, j, queryHTTP, 60*time.Second)
	api := "http://" + queryHTTP
	client := &http.Client{Timeout: 60 * time.Second}
	get := func(b *testing.B, u string) int {
		resp, err := client.Get(u)
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("GET %s: %s", u, resp.Status)
		}
		return int(n)
	}

	b.Run("trace_by_id", func(b *testing.B) {
		rng := rand.New(rand.NewPCG(1, 2))
		for b.Loop() {
			id := spangen.TraceID(rng.IntN(shape.Traces))
			if get(b, api+"/api/v3/traces/"+hex.EncodeToString(id[:])) < 1000 {
				b.Fatal("a short answer: not the trace")
			}
		}
	})
	b.Run("search_service_last_hour", func(b *testing.B) {
		i := 0
		for b.Loop() {
			now := time.Now()
			q := url.Values{
				"query.service_name":   {"svc-" + strconv.Itoa(i%shape.Services)},
				"query.start_time_min": {now.Add(-time.Hour).Format(time.RFC3339Nano)},
				"query.start_time_max": {now.Format(time.RFC3339Nano)},
				"query.num_traces":     {"20"},
			}
			i++
			get(b, api+"/api/v3/traces?"+q.Encode())
		}
	})
	b.Run("services", func(b *testing.B) {
		for b.Loop() {
			get(b, api+"/api/v3/services")
		}
	})
	b.Run("dependencies_last_hour", func(b *testing.B) {
		for b.Loop() {
			q := url.Values{
				"endTs":    {strconv.FormatInt(time.Now().UnixMilli(), 10)},
				"lookback": {strconv.FormatInt(time.Hour.Milliseconds(), 10)},
			}
			get(b, api+"/api/dependencies?"+q.Encode())
		}
	})
	j.stop(b)
	c.stop(b)
}
