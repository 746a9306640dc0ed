package postgrescopyexporter

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/config/configopaque"

	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestThroughPgBouncer runs migrations, the schema check, COPY and the
// ledger through a real PgBouncer in transaction mode, directly and with
// Redis, where server connections change between transactions.
func TestThroughPgBouncer(t *testing.T) {
	bouncer := pgtest.StartPgBouncer(t)
	pool := pgtest.Pool(t)
	ctx := context.Background()

	t.Run("direct", func(t *testing.T) {
		cfg, schemaName := testConfig(t)
		cfg.Endpoint = configopaque.String(bouncer.URL)
		cfg.QueryExecMode = "simple_protocol"
		te, _ := startTraces(t, cfg)
		var wg sync.WaitGroup
		for g := 0; g < 6; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for r := 0; r < 10; r++ {
					assert.NoError(t, te.ConsumeTraces(ctx, makeTraces(100, fmt.Sprintf("bouncer-%d-%d", g, r))))
				}
			}()
		}
		wg.Wait()
		// A retried batch is still recognized through the pooler.
		pushTwice(t, cfg, makeTraces(10, "retry"))
		assert.EqualValues(t, 6*10*100+10, pgtest.Count(t, pool, schemaName, "spans"))
	})

	t.Run("create_schema false", func(t *testing.T) {
		cfg, schemaName := testConfig(t)
		cfg.Endpoint = configopaque.String(bouncer.URL)
		cfg.QueryExecMode = "simple_protocol"
		_, _ = startTraces(t, cfg) // creates the schema
		check := *cfg
		check.CreateSchema = false
		te, _ := startTraces(t, &check)
		require.NoError(t, te.ConsumeTraces(ctx, makeTraces(5, "checked")))
		assert.EqualValues(t, 5, pgtest.Count(t, pool, schemaName, "spans"))
	})

	t.Run("redis", func(t *testing.T) {
		cfg, schemaName := testConfig(t)
		cfg.Endpoint = configopaque.String(bouncer.URL)
		cfg.QueryExecMode = "simple_protocol"
		rdb, prefix := testRedis(t)
		te, _ := startTraces(t, withRedis(cfg, prefix, "bouncer"))
		for r := 0; r < 50; r++ {
			require.NoError(t, te.ConsumeTraces(ctx, uniqueTraces(r, 20)))
		}
		require.Eventually(t, func() bool {
			return pgtest.Count(t, pool, schemaName, "spans") == 1000 && streamLen(t, rdb, prefix) == 0
		}, 30*time.Second, 50*time.Millisecond)
	})
}
