package postgrescopyexporter

import (
	"context"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/internal/testenv/ports"
	"github.com/postgrescopy/postgrescopy/internal/testenv/tcpproxy"
)

func observedSettings() (exporter.Settings, *observer.ObservedLogs) {
	core, logs := observer.New(zapcore.DebugLevel)
	set := exportertest.NewNopSettings(metadata.Type)
	set.Logger = zap.New(core)
	return set, logs
}

func TestPushBeforeStartIsAnError(t *testing.T) {
	cfg, _ := testConfig(t)
	e, err := newExporter(cfg, exportertest.NewNopSettings(metadata.Type))
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.shared.Shutdown(context.Background()) })
	require.ErrorIs(t, pusher(e, request.Traces)(context.Background(), request.New(request.Traces, makeTraces(1, "s"))), errNotStarted)
	require.NoError(t, e.shutdown(context.Background()), "shutdown without start is safe")
}

func TestMissingDatabaseFailsStartPlainly(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.Endpoint = configopaque.String(strings.Replace(pgtest.URL(), "/postgres?", "/postgrescopy_no_such_db?", 1))
	te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "does not exist")
	assert.Contains(t, err.Error(), "create it or fix the URL")
	require.NoError(t, te.Shutdown(context.Background()))
}

func TestNewerSchemaIsRefused(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	require.NoError(t, te.Shutdown(ctx))

	pool := pgtest.Pool(t)
	_, err = pool.Exec(ctx, `INSERT INTO "`+schemaName+`".schema_version (version, name) VALUES (9999, 'from the future')`)
	require.NoError(t, err)
	te, err = NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(ctx, componenttest.NewNopHost())
	require.ErrorContains(t, err, "version 9999")
	require.NoError(t, te.Shutdown(ctx))
}

func TestCreateSchemaFalseNamesWhatIsMissing(t *testing.T) {
	cfg, schemaName := testConfig(t)
	cfg.CreateSchema = false
	ctx := context.Background()
	pool := pgtest.Pool(t)
	// Only the spans' table, without one column.
	_, err := pool.Exec(ctx, `CREATE SCHEMA "`+schemaName+`"; CREATE TABLE "`+schemaName+`".spans_rows (start_time timestamptz)`)
	require.NoError(t, err)
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(ctx, componenttest.NewNopHost())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "spans_rows.span_name (column missing)")
	assert.Contains(t, err.Error(), "logs_rows (table missing or not visible)")
	assert.Contains(t, err.Error(), "contexts (table missing or not visible)")
	assert.Contains(t, err.Error(), "create_schema")
	require.NoError(t, te.Shutdown(ctx))
}

func TestDatabaseDownAtStartIsWaitedFor(t *testing.T) {
	cfg, schemaName := testConfig(t)
	addr := ports.AddrT(t)
	// The proxy leads to the test server, wherever POSTGRESCOPY_TEST_URL puts it.
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	target := u.Host
	cfg.Endpoint = configopaque.String("postgres://postgres@" + addr + "/postgres?sslmode=disable&connect_timeout=2")
	set, logs := observedSettings()
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()), "an unreachable server must not fail the start")
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })

	waiting := logs.FilterMessageSnippet("waiting for it in the background").All()
	require.Len(t, waiting, 1)
	assert.Equal(t, "postgres@127.0.0.1:"+strings.Split(addr, ":")[1]+"/postgres", waiting[0].ContextMap()["target"])

	err = te.ConsumeTraces(ctx, makeTraces(3, "s"))
	require.ErrorContains(t, err, "waiting for PostgreSQL")

	tcpproxy.Start(t, addr, target)
	require.Eventually(t, func() bool {
		return logs.FilterMessage("PostgreSQL is reachable; writing").Len() == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(3, "s")))
	assert.EqualValues(t, 3, pgtest.Count(t, pgtest.Pool(t), schemaName, "spans"))
}

func TestConcurrentStartsMigrateOnce(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A distinct *Config per "collector": no sharing between them.
			c := *cfg
			te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), &c)
			if err == nil {
				err = te.Start(ctx, componenttest.NewNopHost())
			}
			if err == nil {
				err = te.Shutdown(ctx)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Each migration recorded once: nobody re-applied what another applied.
	assert.EqualValues(t, len(schema.Migrations()), pgtest.Count(t, pgtest.Pool(t), schemaName, "schema_version"))
}

// TestLeastPrivilegeRoleRuns runs the exporter as a role holding only
// schema.WriterGrants (the README's SQL), with create_schema: false.
func TestLeastPrivilegeRoleRuns(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	owner, _ := startTraces(t, cfg) // the owner migrates
	require.NoError(t, owner.ConsumeTraces(ctx, makeTraces(1, "owner")))

	pool := pgtest.Pool(t)
	role := schemaName + "_writer"
	_, err := pool.Exec(ctx, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		_, _ = pool.Exec(context.Background(), "DROP ROLE "+pgx.Identifier{role}.Sanitize())
	})
	_, err = pool.Exec(ctx, schema.WriterGrants(schemaName, role))
	require.NoError(t, err)

	writer := *cfg
	writer.CreateSchema = false
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	u.User = url.User(role)
	writer.Endpoint = configopaque.String(u.String())
	set, logs := observedSettings()
	te, err := NewFactory().CreateTraces(ctx, set, &writer)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(30, "writer")))
	// The ledger lookup of a retry works with the writer's grants.
	pushTwice(t, &writer, makeTraces(5, "retried"))
	assert.EqualValues(t, 36, pgtest.Count(t, pool, schemaName, "spans"))
	assert.Zero(t, logs.FilterMessageSnippet("partition maintenance failed").Len(), "maintenance runs through the owner's function")
}

func TestCitusDistributionWithoutCitusFailsStart(t *testing.T) {
	cfg, _ := testConfig(t)
	cfg.Distribution = "citus"
	te, err := NewFactory().CreateTraces(context.Background(), exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorIs(t, err, schema.ErrNoCitus)
	require.NoError(t, te.Shutdown(context.Background()))
}

// refuseMigration2 leaves schemaName at version 1 with a view where
// migration 2 indexes a table: the server refuses that step for good.
func refuseMigration2(t *testing.T, pool *pgxpool.Pool, schemaName string, distribute bool) {
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = schema.MigrateTo(ctx, conn.Conn(), schemaName, 1)
	require.NoError(t, err)
	if distribute {
		// As an older release did (today's Distribute knows the latest
		// schema's tables only).
		_, err = conn.Exec(ctx, "SELECT create_distributed_table($1, 'trace_id')", schema.Qualified(schemaName, "spans"))
		require.NoError(t, err)
	}
	_, err = conn.Exec(ctx, "CREATE VIEW "+schema.Qualified(schemaName, "model_prices")+" AS SELECT 1 AS model, now() AS valid_from")
	require.NoError(t, err)
}

// TestMigrationStepFailureIsNamed: a migration step the server refuses fails
// the start naming the migration and the server's reason, not as a server
// that is "not reachable yet".
func TestMigrationStepFailureIsNamed(t *testing.T) {
	cfg, schemaName := testConfig(t)
	refuseMigration2(t, pgtest.Pool(t), schemaName, false)
	set, logs := observedSettings()
	te, err := NewFactory().CreateTraces(context.Background(), set, cfg)
	require.NoError(t, err)
	err = te.Start(context.Background(), componenttest.NewNopHost())
	require.ErrorContains(t, err, "apply migration 002_ai_spend.sql")
	require.ErrorContains(t, err, "SQLSTATE 42809")
	// The start fails and nothing retries it: the error says so, and what
	// to do.
	require.ErrorContains(t, err, "fix what it names")
	require.ErrorContains(t, err, "not retried: start the collector again once it is fixed")
	require.NotContains(t, err.Error(), "retries meanwhile")
	require.Zero(t, logs.FilterMessageSnippet("not reachable").Len())
	require.NoError(t, te.Shutdown(context.Background()))
}

// TestRetriedSchemaStepSaysSo: a schema step the server refuses for now (a
// lock it waits for past lock_timeout) does not fail the start; the exporter
// says it retries that step, not that PostgreSQL is unreachable, and does.
func TestRetriedSchemaStepSaysSo(t *testing.T) {
	cfg, schemaName := testConfig(t)
	pool := pgtest.Pool(t)
	ctx := context.Background()
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	_, err = schema.Migrate(ctx, conn.Conn(), schemaName)
	require.NoError(t, err)
	// The index set waits for this lock on spans_rows.
	lock, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = lock.Exec(ctx, "LOCK TABLE "+schema.Qualified(schemaName, "spans_rows")+" IN ACCESS EXCLUSIVE MODE")
	require.NoError(t, err)
	t.Cleanup(func() { _ = lock.Rollback(ctx); conn.Release() })
	cfg.Endpoint = configopaque.String(pgtest.URL() + "&lock_timeout=200")

	set, logs := observedSettings()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()), "a step refused for now does not fail the start")
	t.Cleanup(func() { require.NoError(t, te.Shutdown(context.Background())) })
	for _, l := range logs.FilterMessageSnippet("not reachable").All() {
		t.Errorf("logged %q (%v)", l.Message, l.ContextMap()["error"])
	}
	retried := logs.FilterMessageSnippet("retrying it in the background").All()
	require.Len(t, retried, 1)
	assert.Contains(t, retried[0].ContextMap()["error"], "create indexes")
	assert.Contains(t, retried[0].ContextMap()["error"], "SQLSTATE 55P03")

	require.NoError(t, lock.Rollback(ctx))
	require.Eventually(t, func() bool {
		return logs.FilterMessage("PostgreSQL is reachable; writing").Len() == 1
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(3, "s")))
	assert.EqualValues(t, 3, pgtest.Count(t, pool, schemaName, "spans"))
}
