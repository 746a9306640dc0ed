package e2e

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// uuidText formats a trace id the way PostgreSQL prints a uuid.
func uuidText(id pcommon.TraceID) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", id[0:4], id[4:6], id[6:8], id[8:10], id[10:16])
}

// makeTraces builds one resource and scope with a span per id, all in
// traceID.
func makeTraces(ids []uint64, traceID pcommon.TraceID) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "e2e-otlp")
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("e2e")
	now := time.Now()
	for _, id := range ids {
		var sid pcommon.SpanID
		binary.BigEndian.PutUint64(sid[:], id)
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(traceID)
		sp.SetSpanID(sid)
		sp.SetName(fmt.Sprintf("span-%016x", id))
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		sp.Attributes().PutStr("http.route", "/e2e")
	}
	return td
}

// sendTraces exports every batch of batches[g] from goroutine g over one
// shared gRPC connection, and reports failed or partially rejected exports.
func sendTraces(t *testing.T, grpcAddr string, batches [][]ptrace.Traces) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatalf("grpc client: %v", err)
	}
	defer conn.Close()
	client := ptraceotlp.NewGRPCClient(conn)
	var wg sync.WaitGroup
	for g := range batches {
		wg.Go(func() {
			for _, td := range batches[g] {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				resp, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
				cancel()
				if err != nil {
					t.Errorf("sender %d: export: %v", g, err)
					return
				}
				if ps := resp.PartialSuccess(); ps.RejectedSpans() != 0 {
					t.Errorf("sender %d: %d spans rejected: %s", g, ps.RejectedSpans(), ps.ErrorMessage())
				}
			}
		})
	}
	wg.Wait()
}

// TestOTLPClientSpanIDs sends spans with known ids from several concurrent
// OTLP gRPC clients and expects each id in the spans table exactly once, with
// span_id holding the id's 8 bytes as a bigint and trace_id the 16 as a uuid.
func TestOTLPClientSpanIDs(t *testing.T) {
	pool := pgtest.Pool(t)
	schema := pgtest.Schema(t, pool)
	ep := newEndpoints(t)
	c := startCollector(t, ep, collectorConfig(ep, map[string]any{
		"postgrescopy": pgExporter(pgtest.URL(), schema),
	}, "info"))

	const senders, requests, perRequest = 8, 10, 50
	want := map[int64]string{} // span_id as stored → trace_id as text
	batches := make([][]ptrace.Traces, senders)
	add := func(g int, ids []uint64, traceID pcommon.TraceID) {
		for _, id := range ids {
			// The stored bigint is the same 8 bytes read as a signed
			// big-endian integer.
			if _, dup := want[int64(id)]; dup {
				t.Fatalf("test bug: span id %016x generated twice", id)
			}
			want[int64(id)] = uuidText(traceID)
		}
		batches[g] = append(batches[g], makeTraces(ids, traceID))
	}
	for g := range senders {
		for r := range requests {
			ids := make([]uint64, perRequest)
			for i := range ids {
				// The sender in the top 3 bits puts half of the ids above
				// MaxInt64 (negative bigints); bit 40 keeps them apart from
				// the edge ids below.
				ids[i] = uint64(g)<<61 | 1<<40 | uint64(r*perRequest+i+1)
			}
			traceID := pcommon.TraceID{0xe2, 0xe0, byte(g), byte(r), 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0x01}
			add(g, ids, traceID)
		}
	}
	// Edge ids: the sign bit alone, all ones (-1), the largest positive, 1.
	add(0, []uint64{1 << 63, math.MaxUint64, math.MaxInt64, 1},
		pcommon.TraceID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfe})

	sendTraces(t, ep.grpc, batches)
	if t.Failed() {
		t.FailNow()
	}

	waitRows(t, c, pool, schema, map[string]int64{"spans": int64(len(want))}, 30*time.Second)
	c.stop(t) // after the drain nothing may be added or missing

	rows, err := pool.Query(context.Background(),
		"SELECT span_id, trace_id::text FROM "+pgx.Identifier{schema, "spans"}.Sanitize())
	if err != nil {
		t.Fatalf("query spans: %v", err)
	}
	seen := map[int64]int{}
	for rows.Next() {
		var sid *int64
		var tid *string
		if err := rows.Scan(&sid, &tid); err != nil {
			t.Fatalf("scan: %v", err)
		}
		if sid == nil || tid == nil {
			t.Errorf("row with NULL span_id or trace_id (%v, %v)", sid, tid)
			continue
		}
		seen[*sid]++
		if wantTrace, ok := want[*sid]; !ok {
			t.Errorf("span_id %d (%016x) was never sent", *sid, uint64(*sid))
		} else if *tid != wantTrace {
			t.Errorf("span_id %016x: trace_id %s, want %s", uint64(*sid), *tid, wantTrace)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("read spans: %v", err)
	}
	missing := 0
	for id := range want {
		switch n := seen[id]; {
		case n == 0:
			missing++
			if missing <= 10 {
				t.Errorf("span_id %016x missing", uint64(id))
			}
		case n > 1:
			t.Errorf("span_id %016x stored %d times", uint64(id), n)
		}
	}
	if missing > 0 {
		t.Errorf("%d of %d span ids missing", missing, len(want))
	}
}
