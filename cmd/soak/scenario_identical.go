package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/testenv/redisserver"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// runIdentical sends five log records without timestamps, byte for byte
// the same (a heartbeat), as five requests 1.2 s apart — distinct events
// that a client sent and the collector acknowledged five times — in direct
// and in Redis mode: five rows each.
func runIdentical(ctx context.Context, o *options) []row {
	direct := identical(ctx, o, false)
	return []row{direct, identical(ctx, o, true)}
}

const identicalRequests = 5

func identical(ctx context.Context, o *options, withRedis bool) (r row) {
	r = row{scenario: "identical", mode: "direct"}
	redisAddr := ""
	if withRedis {
		r.mode = "redis"
		rs, err := redisserver.Start(ctx, redisserver.Options{})
		if err != nil {
			r.err = err
			return r
		}
		defer rs.Close()
		redisAddr = rs.Addr()
	}
	e, err := newEnv(ctx, o, "identical/"+r.mode, o.pgURL, redisAddr)
	if err != nil {
		r.err = err
		return r
	}
	defer e.close()
	defer e.finish(&r)
	if err := e.startCollector(ctx, collectorSpec{signals: []string{"logs"}}); err != nil {
		r.err = err
		return r
	}
	acked, err := sendIdentical(ctx, e.grpcAddr)
	if err != nil {
		r.err = err
		return r
	}
	if withRedis {
		var drained bool
		if drained, err = e.waitDrained(ctx, "logs", "logs", o.shortDrain); err == nil && !drained {
			r.note("the stream did not drain within %s", o.shortDrain)
		}
	} else {
		_, err = e.waitRows(ctx, "logs", acked, 15*time.Second)
	}
	if err != nil {
		r.err = err
		return r
	}
	n, err := e.count(ctx, "logs")
	if err != nil {
		r.err = err
		return r
	}
	r.acked, r.reported = acked, "-"
	r.stored, r.missing, r.duplicated = min(n, acked), max(acked-n, 0), max(n-acked, 0)
	r.pass = n == acked && acked == identicalRequests
	if acked != identicalRequests {
		r.note("only %d of %d requests acknowledged", acked, identicalRequests)
	}
	return r
}

// sendIdentical exports the same log record five times and returns how many
// calls were acknowledged. The record's body carries a nonce so that this
// run's rows are its own; the five requests are identical to each other.
func sendIdentical(ctx context.Context, grpcAddr string) (int64, error) {
	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return 0, fmt.Errorf("OTLP client: %w", err)
	}
	defer conn.Close()
	client := plogotlp.NewGRPCClient(conn)
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "soak-heartbeat")
	sl := rl.ScopeLogs().AppendEmpty()
	sl.Scope().SetName("soak")
	lr := sl.LogRecords().AppendEmpty()
	lr.SetSeverityNumber(plog.SeverityNumberInfo)
	lr.SetSeverityText("INFO")
	lr.Body().SetStr("heartbeat " + hex.EncodeToString(nonce[:]))
	req := plogotlp.NewExportRequestFromLogs(ld)
	var acked int64
	for i := range identicalRequests {
		if i > 0 {
			if err := sleepCtx(ctx, 1200*time.Millisecond); err != nil {
				return acked, err
			}
		}
		cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		resp, err := client.Export(cctx, req)
		cancel()
		if err == nil && resp.PartialSuccess().RejectedLogRecords() == 0 {
			acked++
		}
	}
	return acked, nil
}
