package pgwrite

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgcount"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestFlushRoundTrips: a flush of one table, with everything its
// transaction can hold (work_mem, the ledger, quarantined entries, a
// partition claim), waits for the server twice: once for the statements
// before the COPY, once for the COPY and its COMMIT, and so does a batch of
// several tables. New contexts add one round trip, before the transaction,
// and so does the first write on a connection, which prepares the ledger
// insert and the claim.
// A ledger conflict costs no COPY; a refused row in the second table of a
// batch sends it through isolation, as ever. What it writes is what a write
// of the same rows always wrote.
func TestFlushRoundTrips(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.Pool(t)
	name, layout := routedSchema(t, admin)

	// One connection: the statements a write prepares are prepared once.
	pool, proxy := countedPool(t)

	w := NewLayoutWriter(pool, name, layout)
	require.NoError(t, w.SetWorkMem("32MB"))
	hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	// The partition list is read outside the write's transaction, at most
	// every partitionsTTL: read it before counting.
	w.partitions.refresh(ctx, pool)
	require.NotEmpty(t, w.partitions.of("spans_rows"))
	proxy.Reset()

	only := func(what string) pgcount.Transaction {
		t.Helper()
		txs := proxy.Transactions()
		require.Len(t, txs, 1, what)
		proxy.Reset()
		return txs[0]
	}

	// Spans from stream entries, with a quarantined entry, new contexts and
	// a partition to claim.
	var s entry.Entries
	s.Reset(layout)
	var eb rows.Batch
	eb.SetLayout(layout)
	eb.AddTraces(aiCalls(40, hour.Add(time.Minute)))
	e, err := entry.Append(nil, &eb, true)
	require.NoError(t, err)
	require.NoError(t, s.Add(e))
	l := &Ledger{Stream: "st", IDs: []string{"1-0", "2-0"},
		Quarantine: []Quarantined{{Stream: "st", EntryID: "2-0", LedgerKey: "k", Format: "x", Reason: "unreadable", Payload: []byte{1}}}}
	res, err := w.WriteEntries(ctx, &s, l)
	require.NoError(t, err)
	require.Equal(t, "spans_p"+hour.Format("20060102_1504"), res[0].Partition, "routed")
	require.Equal(t, 4, proxy.RoundTrips(), "the new contexts, the statements prepared once per connection, then the transaction")
	tx := only("entries")
	require.Equal(t, 2, tx.RoundTrips, "one table: %q", tx.Statements)
	for _, want := range []string{"work_mem", "ledger", "quarantine", "LOCK TABLE", "COPY"} {
		require.True(t, tx.Has(want), "%s in the flush: %q", want, tx.Statements)
	}
	require.False(t, tx.Has(`"contexts"`), "contexts are committed before: %q", tx.Statements)
	require.EqualValues(t, 40, pgtest.Count(t, admin, name, "spans"))
	require.EqualValues(t, 1, pgtest.Count(t, admin, name, QuarantineTable))
	require.EqualValues(t, 2, pgtest.Count(t, admin, name, "ledger"))

	// The same ids again: the pipeline fails on the ledger, no COPY is
	// sent, and the transaction is rolled back.
	_, err = w.WriteEntries(ctx, &s, &Ledger{Stream: "st", IDs: []string{"1-0"}})
	require.ErrorIs(t, err, ErrAlreadyCommitted)
	total := proxy.RoundTrips()
	tx = only("conflict")
	require.False(t, tx.Has("COPY"), "%q", tx.Statements)
	require.LessOrEqual(t, tx.RoundTrips, 2, "%q", tx.Statements)
	require.Equal(t, tx.RoundTrips, total, "contexts known committed are not inserted again")
	require.EqualValues(t, 40, pgtest.Count(t, admin, name, "spans"))

	// A batch of two tables: the same two round trips.
	var b rows.Batch
	b.SetLayout(layout)
	b.AddTraces(aiCalls(5, hour.Add(2*time.Minute)))
	b.AddLogs(logs(3))
	res, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"3-0"}})
	require.NoError(t, err)
	require.Len(t, res, 2)
	total = proxy.RoundTrips()
	tx = only("two tables")
	require.Equal(t, 2, tx.RoundTrips, "%q", tx.Statements)
	require.Equal(t, 3, total, "the logs' new context, then the transaction")
	require.EqualValues(t, 45, pgtest.Count(t, admin, name, "spans"))
	require.EqualValues(t, 3, pgtest.Count(t, admin, name, "logs"))

	// A refused log row after the spans' COPY: isolated, the rest written.
	_, err = admin.Exec(ctx, "ALTER TABLE "+pgx.Identifier{name, "logs_rows"}.Sanitize()+
		" ADD CONSTRAINT no_poison CHECK (event_name IS DISTINCT FROM 'poison')")
	require.NoError(t, err)
	b.Reset()
	b.AddTraces(aiCalls(4, hour.Add(3*time.Minute)))
	b.AddLogs(logs(5, 2))
	res, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: "st", IDs: []string{"4-0"}})
	require.NoError(t, err)
	require.Equal(t, []TableResult{{Table: "spans", Rows: 4}, {Table: "logs", Rows: 4, Rejected: 1}}, clearBytes(res),
		"the isolating write, through spans_rows")
	proxy.Reset()
	require.EqualValues(t, 49, pgtest.Count(t, admin, name, "spans"))
	require.EqualValues(t, 7, pgtest.Count(t, admin, name, "logs"))
	require.EqualValues(t, 1, pgtest.Count(t, admin, name, RejectsTable))
	require.EqualValues(t, 4, pgtest.Count(t, admin, name, "ledger"))

	// Nothing stays open on the pool's connections.
	var open int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state LIKE 'idle in transaction%' AND pid <> pg_backend_pid()
		AND query ILIKE '%`+name+`%'`).Scan(&open))
	require.Zero(t, open)
}

// countedPool is a pool of one connection to the test server through a
// pgcount proxy, which counts its round trips and transactions.
func countedPool(t *testing.T) (*pgxpool.Pool, *pgcount.Proxy) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(pgtest.URL())
	require.NoError(t, err)
	proxy, err := pgcount.Start("127.0.0.1:0", net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port))))
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	_, port, err := net.SplitHostPort(proxy.Addr())
	require.NoError(t, err)
	p, err := strconv.Atoi(port)
	require.NoError(t, err)
	cfg.ConnConfig.Host, cfg.ConnConfig.Port = "127.0.0.1", uint16(p)
	cfg.MaxConns = 1
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool, proxy
}

// routedSchema makes a schema as the exporter does with the genai preset,
// with hourly partitions around now: spans are routed into them.
func routedSchema(t *testing.T, pool *pgxpool.Pool) (string, *tables.Layout) {
	t.Helper()
	ctx := context.Background()
	name := pgtest.Schema(t, pool)
	layout, err := tables.NewLayout(tables.GenAI())
	require.NoError(t, err)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), name)
	if err == nil {
		err = schema.AddColumns(ctx, conn.Conn(), name, schema.PromotedColumns(layout))
	}
	conn.Release()
	require.NoError(t, err)
	_, err = pool.Exec(ctx, "SELECT "+pgx.Identifier{name, "postgrescopy_ai_configure"}.Sanitize()+"('[]', NULL)")
	require.NoError(t, err)
	_, err = schema.Maintain(ctx, pool, name, schema.Partitioning{Interval: time.Hour, Premake: 2})
	require.NoError(t, err)
	return name, layout
}

// TestFirstWritesRouted: the first writes of a writer, started together (a
// collector's first flush of every signal), all wait for the partitions'
// first list: none goes through spans_rows.
func TestFirstWritesRouted(t *testing.T) {
	ctx := context.Background()
	pool := pgtest.Pool(t)
	name, layout := routedSchema(t, pool)
	hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	for round := range 3 {
		w := NewLayoutWriter(pool, name, layout)
		const n = 6
		parts := make(chan string, n)
		var wg sync.WaitGroup
		for k := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var b rows.Batch
				b.SetLayout(layout)
				b.AddTraces(aiCalls(10, hour.Add(time.Duration(round*n+k)*time.Minute)))
				res, err := w.Write(ctx, &b)
				if err != nil {
					parts <- err.Error()
					return
				}
				parts <- res[0].Partition
			}()
		}
		wg.Wait()
		close(parts)
		for p := range parts {
			require.Equal(t, "spans_p"+hour.Format("20060102_1504"), p, "round %d", round)
		}
	}
}

// TestPreparedStatementsLost: a write whose connection lost the statements
// it prepared (DEALLOCATE ALL, as a pooler's DISCARD ALL does) prepares them
// again and writes, once; and a pool that keeps no statements (PgBouncer's
// simple_protocol) sends them unnamed.
func TestPreparedStatementsLost(t *testing.T) {
	ctx := context.Background()
	admin := pgtest.Pool(t)
	name, layout := routedSchema(t, admin)
	hour := time.Now().UTC().Truncate(time.Hour).Add(time.Hour)
	for _, mode := range []string{"cache_statement", "simple_protocol"} {
		cfg, err := pgxpool.ParseConfig(pgtest.URL())
		require.NoError(t, err)
		cfg.MaxConns = 1
		if mode == "simple_protocol" {
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
		}
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(pool.Close)
		w := NewLayoutWriter(pool, name, layout)
		require.Equal(t, mode == "cache_statement", w.prepared, mode)
		w.partitions.refresh(ctx, pool)
		write := func(id string, minute int) {
			t.Helper()
			var b rows.Batch
			b.SetLayout(layout)
			b.AddTraces(aiCalls(3, hour.Add(time.Duration(minute)*time.Minute)))
			res, err := w.WriteLedgered(ctx, &b, &Ledger{Stream: mode, IDs: []string{id}})
			require.NoError(t, err, mode)
			require.Equal(t, "spans_p"+hour.Format("20060102_1504"), res[0].Partition, "routed, %s", mode)
		}
		write("1-0", 1)
		_, err = pool.Exec(ctx, "DEALLOCATE ALL")
		require.NoError(t, err)
		write("2-0", 2)
		write("3-0", 3)
		var b rows.Batch
		b.SetLayout(layout)
		b.AddTraces(aiCalls(3, hour.Add(4*time.Minute)))
		_, err = w.WriteLedgered(ctx, &b, &Ledger{Stream: mode, IDs: []string{"3-0"}})
		require.ErrorIs(t, err, ErrAlreadyCommitted, mode)
	}
	require.EqualValues(t, 18, pgtest.Count(t, admin, name, "spans"))
	require.EqualValues(t, 6, pgtest.Count(t, admin, name, "ledger"))
}
