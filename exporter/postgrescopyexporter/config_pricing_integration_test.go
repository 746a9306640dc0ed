package postgrescopyexporter

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/exporter/exportertest"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestPricingConfigRefusesMalformedFile: the Collector's validation of the
// config parses the price file and names the line and the reason.
func TestPricingConfigRefusesMalformedFile(t *testing.T) {
	cfg := defaultConfig()
	cfg.Endpoint = "postgres://otel@127.0.0.1:5432/telemetry"
	file := filepath.Join(t.TempDir(), "prices.yaml")
	require.NoError(t, os.WriteFile(file, []byte("prices:\n  - model: gpt-4o\n    input: 2.50\n    output: ten\n"), 0o600))
	cfg.Pricing.File = file
	err := confmap.Validate(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `line 4: output: "ten" is not a price per million tokens`)

	cfg.Pricing.File = filepath.Join(t.TempDir(), "absent.yaml")
	assert.ErrorContains(t, confmap.Validate(cfg), "read price file")

	cfg.Pricing.File = ""
	cfg.CostAttribution.Dimensions = []DimensionConfig{{Name: "team", From: []string{"attr:team"}}, {Name: "team", From: []string{"span:x"}}}
	err = confmap.Validate(cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `key "attr:team" must be "span:<key>" or "resource:<key>"`)
	assert.Contains(t, err.Error(), `name "team" is given twice`)

	cfg.CostAttribution.Dimensions = nil
	require.NoError(t, confmap.Validate(cfg), "no price file is valid: nothing is priced")
}

// TestPriceFileReloads: a changed price file is loaded into the catalog
// while the exporter runs; a malformed edit keeps the previous prices.
func TestPriceFileReloads(t *testing.T) {
	cfg, schemaName := testConfig(t)
	file := filepath.Join(t.TempDir(), "prices.yaml")
	write := func(s string) { require.NoError(t, os.WriteFile(file, []byte(s), 0o600)) }
	write("prices:\n  - model: gpt-4o\n    input: 2.50\n    output: 10\n")
	cfg.Pricing.File = file
	cfg.Pricing.ReloadInterval = time.Second
	startTracesExporter(t, cfg)
	pool := pgtest.Pool(t)
	input := func() string {
		var s string
		require.NoError(t, pool.QueryRow(context.Background(), `SELECT string_agg(model || '=' || input_per_mtok || '@' || origin, ',' ORDER BY model)
FROM `+pgx.Identifier{schemaName, "model_prices"}.Sanitize()).Scan(&s))
		return s
	}
	assert.Equal(t, "gpt-4o=2.50@"+file+":2", input(), "loaded at start")

	write("prices:\n  - model: gpt-4o\n    input: 2.00\n    output: 8\n  - model: o3-mini\n    input: 1.10\n    output: 4.40\n")
	want := "gpt-4o=2.00@" + file + ":2,o3-mini=1.10@" + file + ":5"
	require.Eventually(t, func() bool { return input() == want }, 5*time.Second, 100*time.Millisecond, "reloaded on change")

	write("prices:\n  - model: gpt-4o\n    input: free\n    output: 8\n")
	time.Sleep(2500 * time.Millisecond) // two polls
	assert.Equal(t, want, input(), "a malformed edit keeps the previous prices")
}

// TestLeastPrivilegeRoleLoadsPrices: a create_schema: false writer with a
// price file needs the README's grants on model_prices beyond
// schema.WriterGrants; without them the start fails naming the table, with
// them the prices load.
func TestLeastPrivilegeRoleLoadsPrices(t *testing.T) {
	cfg, schemaName := testConfig(t)
	ctx := context.Background()
	startTracesExporter(t, cfg) // the owner migrates

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

	file := filepath.Join(t.TempDir(), "prices.yaml")
	require.NoError(t, os.WriteFile(file, []byte("prices:\n  - model: gpt-4o\n    input: 2.50\n    output: 10\n"), 0o600))
	writer := *cfg
	writer.CreateSchema = false
	writer.Pricing.File = file
	u, err := url.Parse(pgtest.URL())
	require.NoError(t, err)
	u.User = url.User(role)
	writer.Endpoint = configopaque.String(u.String())

	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), &writer)
	require.NoError(t, err)
	err = te.Start(ctx, componenttest.NewNopHost())
	require.Error(t, err, "no grant on model_prices")
	assert.Contains(t, err.Error(), "model_prices")
	require.NoError(t, te.Shutdown(ctx))

	s := pgx.Identifier{schemaName}.Sanitize()
	r := pgx.Identifier{role}.Sanitize()
	_, err = pool.Exec(ctx, "GRANT SELECT, INSERT, DELETE ON "+s+".model_prices TO "+r+"; GRANT USAGE ON SEQUENCE "+s+".model_prices_id_seq TO "+r)
	require.NoError(t, err)
	startTracesExporter(t, &writer)
	assert.EqualValues(t, 1, pgtest.Count(t, pool, schemaName, "model_prices"), "the writer loaded the price file")
}
