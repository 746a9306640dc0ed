package pricing

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Dimension is one cost attribution dimension: its value on a call is the
// first of its keys present, read as text.
type Dimension struct {
	Name string   `json:"name"`
	From []Source `json:"from"`
}

// Source is one attribute key: Scope is "span" or "resource".
type Source struct {
	Scope string `json:"scope"`
	Key   string `json:"key"`
}

// Configure sets the dimensions and the rollup's late window, rebuilding the
// gen_ai_calls view; run it after the promoted columns exist. It needs the
// schema owner's rights (create_schema: true).
func Configure(ctx context.Context, pool *pgxpool.Pool, schemaName string, dims []Dimension, lateWindow time.Duration) error {
	if dims == nil {
		dims = []Dimension{}
	}
	b, err := json.Marshal(dims)
	if err != nil {
		return fmt.Errorf("encode cost attribution dimensions: %w", err)
	}
	_, err = pool.Exec(ctx, "SELECT "+pgx.Identifier{schemaName, "postgrescopy_ai_configure"}.Sanitize()+
		"($1::jsonb, make_interval(secs => $2))", string(b), lateWindow.Seconds())
	if err != nil {
		return fmt.Errorf("set cost attribution dimensions in schema %q: %w", schemaName, err)
	}
	return nil
}

// Load replaces the catalog's file rows (source 'file') with prices in one
// transaction, so that no query sees a half-loaded catalog. origin names the
// file in the rows.
func Load(ctx context.Context, pool *pgxpool.Pool, schemaName, origin string, prices []Price) error {
	table := pgx.Identifier{schemaName, "model_prices"}.Sanitize()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "DELETE FROM "+table+" WHERE source = 'file'"); err != nil {
			return err
		}
		rows := make([][]any, len(prices))
		for i, p := range prices {
			// A name prices its model and the model's versions (schema 010).
			match := "family"
			if p.Pattern {
				match = "pattern"
			}
			rows[i] = []any{nullable(p.Provider), p.Model, match, p.Input, p.Output,
				nullable(p.CacheRead), nullable(p.CacheWrite), nullable(p.Reasoning), p.Currency,
				bound(p.ValidFrom, "-infinity"), bound(p.ValidTo, "infinity"), "file",
				fmt.Sprintf("%s:%d", origin, p.Line)}
		}
		// Text values cast by PostgreSQL: numeric keeps the prices exact.
		for _, r := range rows {
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+` (provider, model, match, input_per_mtok, output_per_mtok,
  cache_read_per_mtok, cache_write_per_mtok, reasoning_per_mtok, currency, valid_from, valid_to, source, origin)
VALUES ($1, $2, $3, $4::numeric, $5::numeric, $6::numeric, $7::numeric, $8::numeric, $9, $10::timestamptz, $11::timestamptz, $12, $13)`, r...); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("load %d prices from %s into %s: %w", len(prices), origin, table, err)
	}
	// Every GenAI call looks its price up: without statistics the planner
	// takes the small catalog for a large one, and a long range's query for
	// one worth compiling (JIT), which costs it seconds.
	if _, err := pool.Exec(ctx, "ANALYZE "+table); err != nil {
		return fmt.Errorf("analyze %s: %w", table, err)
	}
	return nil
}

func nullable(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func bound(t time.Time, open string) string {
	if t.IsZero() {
		return open
	}
	return t.UTC().Format(time.RFC3339Nano)
}
