package main

import (
	"context"
	"encoding/binary"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// request is what the soak remembers of one export call: its span ids are
// spanID(first) .. spanID(first+n-1).
type request struct {
	first uint64
	n     uint32
	acked bool
	done  time.Time // when the call returned
}

// spanID maps a counter value to a span id. The counter's parity moves half
// of the ids above MaxInt64, so negative bigints are checked too; ids stay
// distinct because the counter never reaches bit 63.
func spanID(k uint64) uint64 { return k | (k&1)<<63 }

// load is the OTLP traffic: senders export requests of fresh span ids until
// stopped, and record which calls the collector acknowledged.
type load struct {
	perRequest int
	nonce      uint64        // the high half of every trace id: unique to this soak
	pause      time.Duration // between two calls of a sender (0: none)
	timeout    time.Duration // of each call (0: 15s)

	spans    atomic.Uint64 // last span counter value handed out
	requests atomic.Uint64 // last request number handed out
	stopped  atomic.Bool

	mu     sync.Mutex
	log    []request
	errors map[string]int // failed calls by gRPC code
}

func (l *load) run(grpcAddr string, senders int) (wait func(), err error) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	client := ptraceotlp.NewGRPCClient(conn)
	l.errors = map[string]int{}
	var wg sync.WaitGroup
	for g := range senders {
		wg.Go(func() { l.sender(client, g) })
	}
	return func() { wg.Wait(); _ = conn.Close() }, nil
}

func (l *load) sender(client ptraceotlp.GRPCClient, g int) {
	var mine []request
	errs := map[string]int{}
	for !l.stopped.Load() {
		n := uint64(l.perRequest)
		first := l.spans.Add(n) - n + 1
		td := l.traces(l.requests.Add(1), first, g)
		// The deadline outlasts the exporter's retries (5s) and a COPY:
		// a call that times out is counted as failed all the same.
		timeout := l.timeout
		if timeout == 0 {
			timeout = 15 * time.Second
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		resp, err := client.Export(ctx, ptraceotlp.NewExportRequestFromTraces(td))
		cancel()
		acked := err == nil && resp.PartialSuccess().RejectedSpans() == 0
		mine = append(mine, request{first: first, n: uint32(n), acked: acked, done: time.Now()})
		if !acked {
			code := "partial_success"
			if err != nil {
				code = status.Code(err).String()
				if errors.Is(err, context.DeadlineExceeded) {
					code = codes.DeadlineExceeded.String()
				}
			}
			errs[code]++
			// The collector is probably down: do not spin through ids.
			time.Sleep(20 * time.Millisecond)
		}
		if l.pause > 0 {
			time.Sleep(l.pause)
		}
	}
	l.mu.Lock()
	l.log = append(l.log, mine...)
	for k, v := range errs {
		l.errors[k] += v
	}
	l.mu.Unlock()
}

// traces is one request: one resource and scope, every span in one trace
// whose id is the soak's nonce and the request number.
func (l *load) traces(reqNo, first uint64, sender int) ptrace.Traces {
	var tid pcommon.TraceID
	binary.BigEndian.PutUint64(tid[:8], l.nonce)
	binary.BigEndian.PutUint64(tid[8:], reqNo)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "soak")
	rs.Resource().Attributes().PutInt("soak.sender", int64(sender))
	ss := rs.ScopeSpans().AppendEmpty()
	ss.Scope().SetName("soak")
	now := time.Now()
	for i := range uint64(l.perRequest) {
		var sid pcommon.SpanID
		binary.BigEndian.PutUint64(sid[:], spanID(first+i))
		sp := ss.Spans().AppendEmpty()
		sp.SetTraceID(tid)
		sp.SetSpanID(sid)
		sp.SetName("soak-span")
		sp.SetKind(ptrace.SpanKindServer)
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		sp.Attributes().PutStr("http.route", "/soak")
		sp.Attributes().PutInt("soak.request", int64(reqNo))
	}
	return td
}
