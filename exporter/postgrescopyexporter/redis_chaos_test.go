package postgrescopyexporter

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/exporter"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// chaosLoad sends requests of unique spans (uniqueTraces) from a few
// goroutines and records which were acknowledged: a test breaks Redis
// meanwhile, then checks each acknowledged span is stored exactly once.
type chaosLoad struct {
	spans int
	next  atomic.Int64
	stop  chan struct{}
	wg    sync.WaitGroup

	mu    sync.Mutex
	acked map[int]time.Time // request → when acknowledged
	sent  int
}

// startChaosLoad starts senders goroutines, each sending back to back
// through te (whose retry_on_failure retries a failed request, under the
// same ledger key).
func startChaosLoad(te exporter.Traces, senders, spans int) *chaosLoad {
	l := &chaosLoad{spans: spans, stop: make(chan struct{}), acked: map[int]time.Time{}}
	for range senders {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				req := int(l.next.Add(1))
				err := te.ConsumeTraces(context.Background(), uniqueTraces(req, spans))
				l.mu.Lock()
				l.sent++
				if err == nil {
					l.acked[req] = time.Now()
				}
				l.mu.Unlock()
				// A steady load PostgreSQL keeps up with: the test is about
				// Redis, not a backlog.
				time.Sleep(20 * time.Millisecond)
			}
		}()
	}
	return l
}

// ackedSince counts the requests acknowledged after t.
func (l *chaosLoad) ackedSince(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, at := range l.acked {
		if at.After(t) {
			n++
		}
	}
	return n
}

func (l *chaosLoad) Stop() {
	close(l.stop)
	l.wg.Wait()
}

// chaosVerdict is what reached PostgreSQL.
type chaosVerdict struct {
	Acked, Stored, Missing, Duplicated int // spans
	SentUnacked, StoredUnacked         int // spans of requests not acknowledged
}

func (v chaosVerdict) String() string {
	return fmt.Sprintf("acknowledged %d spans: stored %d, missing %d, duplicated %d; not acknowledged %d spans, of which stored %d",
		v.Acked, v.Stored, v.Missing, v.Duplicated, v.SentUnacked, v.StoredUnacked)
}

// spanKey is the span_id column of uniqueTraces' span i of request req.
func spanKey(req, i int) int64 {
	id := [8]byte{2, byte(req >> 16), byte(req >> 8), byte(req), byte(i >> 8), byte(i)}
	return int64(binary.BigEndian.Uint64(id[:]))
}

// verdict waits up to wait for every acknowledged span to be in schema's
// spans table and the backlog to settle, then counts.
func (l *chaosLoad) verdict(t *testing.T, schemaName string, wait time.Duration) chaosVerdict {
	t.Helper()
	pool := pgtest.Pool(t)
	l.mu.Lock()
	acked := make(map[int]bool, len(l.acked))
	for r := range l.acked {
		acked[r] = true
	}
	sent := int(l.next.Load())
	l.mu.Unlock()
	var v chaosVerdict
	deadline := time.Now().Add(wait)
	last, stable := int64(-1), 0
	for {
		counts := map[int64]int{}
		rows, err := pool.Query(context.Background(), `SELECT span_id, count(*) FROM "`+schemaName+`".spans GROUP BY span_id`)
		require.NoError(t, err)
		var total int64
		for rows.Next() {
			var id, n int64
			require.NoError(t, rows.Scan(&id, &n))
			counts[id] = int(n)
			total += n
		}
		require.NoError(t, rows.Err())
		v = chaosVerdict{}
		for req := 1; req <= sent; req++ {
			for i := 0; i < l.spans; i++ {
				n := counts[spanKey(req, i)]
				if n > 1 {
					v.Duplicated += n - 1
				}
				if acked[req] {
					v.Acked++
					if n > 0 {
						v.Stored++
					} else {
						v.Missing++
					}
				} else {
					v.SentUnacked++
					if n > 0 {
						v.StoredUnacked++
					}
				}
			}
		}
		// Done when nothing acknowledged is missing and the table stopped
		// growing for 2s (entries claimed late would still come), or it
		// stopped growing for 5s with some missing.
		if total == last {
			stable++
		} else {
			stable = 0
		}
		last = total
		if (v.Missing == 0 && stable >= 10) || stable >= 25 || time.Now().After(deadline) {
			return v
		}
		time.Sleep(200 * time.Millisecond)
	}
}
