package postgrescopyexporter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pglocal"
	"github.com/postgrescopy/postgrescopy/internal/testenv/tcpproxy"
)

// replicated is a throwaway primary and its streaming standby, whose
// replication connection goes through proxy: closing it cuts replication.
type replicated struct {
	c                *pglocal.Cluster
	primary, standby *pglocal.Server
	proxy            *tcpproxy.Proxy
}

// startReplicated starts a primary (with settings added to
// pglocal.ReplicationSettings) and a standby streaming from it through a
// proxy; everything is stopped when the test ends.
func startReplicated(t *testing.T, settings ...string) *replicated {
	t.Helper()
	c, err := pglocal.NewCluster("pg_basebackup")
	if err != nil {
		t.Skipf("no throwaway PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := c.Primary(ctx, "primary", append(append([]string{}, pglocal.ReplicationSettings...), settings...))
	require.NoError(t, err)
	proxy := tcpproxy.Start(t, "127.0.0.1:0", fmt.Sprintf("127.0.0.1:%d", p.Port))
	s, err := c.StandbyVia(ctx, "standby", p, proxy.Addr())
	require.NoError(t, err)
	return &replicated{c: c, primary: p, standby: s, proxy: proxy}
}

// config is a direct-mode config (no queue: a push returns once its rows
// are committed) whose endpoint names both servers, writing where writes
// are accepted.
func (r *replicated) config() *Config {
	cfg := defaultConfig()
	cfg.Endpoint = configopaque.String(fmt.Sprintf(
		"postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&target_session_attrs=read-write",
		r.primary.Port, r.standby.Port))
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	cfg.RetryConfig.Enabled = false
	return cfg
}

func (r *replicated) pool(t *testing.T, s *pglocal.Server) *pgxpool.Pool {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), s.URL)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// spansOf counts the spans of service on s.
func spansOf(t *testing.T, pool *pgxpool.Pool, schemaName, service string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT count(*) FROM "+schema.Qualified(schemaName, "spans")+" WHERE service_name = $1", service).Scan(&n))
	return n
}

// failover kills the primary (kill -9), promotes the standby and pushes
// until a push succeeds on it.
func (r *replicated) failover(t *testing.T, te exporter.Traces) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, r.c.Kill(r.primary))
	require.NoError(t, r.c.Promote(ctx, r.standby))
	// The standby's settings are the primary's copy: the new primary has
	// no standby of its own to wait for.
	promoted := r.pool(t, r.standby)
	_, err := promoted.Exec(ctx, "ALTER SYSTEM SET synchronous_standby_names = ''")
	require.NoError(t, err)
	_, err = promoted.Exec(ctx, "SELECT pg_reload_conf()")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return te.ConsumeTraces(ctx, makeTraces(5, "after")) == nil
	}, time.Minute, 50*time.Millisecond, "no write succeeds on the promoted standby")
}

// lostLine waits for the line that says what the new primary lacks.
func lostLine(t *testing.T, logs *observer.ObservedLogs, msg string) observer.LoggedEntry {
	t.Helper()
	require.Eventually(t, func() bool { return logs.FilterMessageSnippet(msg).Len() > 0 }, 30*time.Second, 20*time.Millisecond,
		"no %q line after the failover", msg)
	return logs.FilterMessageSnippet(msg).All()[0]
}

// With an asynchronous standby cut from the primary, the batches committed
// after the cut exist on the primary alone: acknowledged, and gone once the
// standby is promoted. The exporter, reaching the promoted standby (another
// timeline), checks the ledger for its recent commits and reports exactly
// those: an Error line and the lost rows counter.
func TestFailoverReportsWhatTheNewPrimaryLacks(t *testing.T) {
	r := startReplicated(t)
	cfg := r.config()
	te, tel, logs := startObservedTraces(t, cfg)
	require.Equal(t, 1, logs.FilterMessageSnippet("replication is asynchronous").Len(), "the start line says what a failover risks")
	ctx := context.Background()
	primary, standby := r.pool(t, r.primary), r.pool(t, r.standby)

	for range 3 {
		require.NoError(t, te.ConsumeTraces(ctx, makeTraces(10, "replicated")))
	}
	require.NoError(t, pglocal.WaitReplayed(ctx, primary, standby, time.Minute))
	r.proxy.Close() // the standby receives nothing from now on
	for range 4 {
		require.NoError(t, te.ConsumeTraces(ctx, makeTraces(10, "cut")))
	}
	require.EqualValues(t, 40, spansOf(t, primary, cfg.Schema, "cut"), "acknowledged: committed on the primary")

	r.failover(t, te)

	e := lostLine(t, logs, "lacks")
	t.Logf("%s %v", e.Message, e.ContextMap())
	require.Equal(t, "error", e.Level.String(), "%v", e.ContextMap())
	require.EqualValues(t, 4, e.ContextMap()["lost_commits"], "%v", e.ContextMap())
	require.EqualValues(t, 7, e.ContextMap()["checked_commits"], "%v", e.ContextMap())
	require.EqualValues(t, 40, counterWhere(t, tel, "otelcol_postgrescopy_failover_lost_rows", "table", "spans"))
	require.EqualValues(t, 40, counterSum(t, tel, "otelcol_postgrescopy_failover_lost_rows"))
	// What was reported missing is what is missing.
	require.EqualValues(t, 0, spansOf(t, standby, cfg.Schema, "cut"))
	require.EqualValues(t, 30, spansOf(t, standby, cfg.Schema, "replicated"))
}

// With a synchronous standby (synchronous_standby_names on the primary) and
// the exporter's synchronous_commit on (the servers' is off), a commit
// returns, and its items are acknowledged, once the standby has flushed it:
// the batches acknowledged just before the kill are all on the promoted
// standby, and the check after the failover finds none missing.
func TestFailoverToASynchronousStandbyLosesNothing(t *testing.T) {
	r := startReplicated(t, "synchronous_standby_names = '*'")
	cfg := r.config()
	cfg.SynchronousCommit = "on"
	te, tel, logs := startObservedTraces(t, cfg)
	require.Equal(t, 1, logs.FilterMessageSnippet("replication is synchronous").Len(), "the start line says what a failover risks")
	ctx := context.Background()

	for range 3 {
		require.NoError(t, te.ConsumeTraces(ctx, makeTraces(10, "replicated")))
	}
	for range 4 {
		require.NoError(t, te.ConsumeTraces(ctx, makeTraces(10, "last")))
	}
	r.failover(t, te) // at once: no wait for replay

	e := lostLine(t, logs, "holds every recent commit")
	t.Logf("%s %v", e.Message, e.ContextMap())
	require.EqualValues(t, 7, e.ContextMap()["checked_commits"], "%v", e.ContextMap())
	require.Zero(t, logs.FilterMessageSnippet("lacks").Len())
	require.Zero(t, counterSum(t, tel, "otelcol_postgrescopy_failover_lost_rows"))
	standby := r.pool(t, r.standby)
	require.EqualValues(t, 40, spansOf(t, standby, cfg.Schema, "last"))
	require.EqualValues(t, 30, spansOf(t, standby, cfg.Schema, "replicated"))
}
