package main

import (
	"context"
	"testing"
	"time"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
	"github.com/postgrescopy/postgrescopy/receiver/loadgenreceiver"
)

// TestQueriesReturnRows runs every queries/*.sql against a fresh schema,
// prepared as the exporter prepares it, holding two loadgen users' telemetry: each must parse, run, and find
// something, so a renamed column or a wrong window cannot go unnoticed.
func TestQueriesReturnRows(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	name := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = prepareSchema(ctx, conn.Conn(), name)
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}

	gen, err := loadgenreceiver.NewGenerator(loadgenConfig(2, 1900, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	w := pgwrite.NewLayoutWriter(pool, name, benchLayout)
	var b rows.Batch
	b.SetLayout(benchLayout)
	for more := true; more; {
		b.Reset()
		more = addNext(gen, &b)
		if b.TotalRows() > 0 {
			if _, err := w.Write(ctx, &b); err != nil {
				t.Fatalf("write: %v", err)
			}
		}
	}

	// As the exporter's maintenance does: the AI spend rollup takes the rows
	// written since the schema was prepared (ai_spend shows rows of hours it
	// has rolled up only once a later run took them).
	if _, err := schema.Maintain(ctx, pool, name, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	qs, err := loadQueries("../../queries", name)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) < 8 {
		t.Fatalf("found %d queries, want the 8 the README documents", len(qs))
	}
	for _, q := range qs {
		t.Run(q.Name, func(t *testing.T) {
			r, err := pool.Query(ctx, q.SQL)
			if err != nil {
				t.Fatalf("%s: %v", q.Title, err)
			}
			n := 0
			for r.Next() {
				n++
			}
			if err := r.Err(); err != nil {
				t.Fatalf("%s: %v", q.Title, err)
			}
			if n == 0 {
				t.Fatalf("%s returned no rows", q.Title)
			}
			t.Logf("%s: %d rows", q.Title, n)
		})
	}
}

// TestLoadQueriesRewritesSchema checks the placeholder rewrite without a server.
func TestLoadQueriesRewritesSchema(t *testing.T) {
	qs, err := loadQueries("../../queries", "bench_x")
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if schemaRef.MatchString(q.SQL) {
			t.Errorf("%s still names otel.<table>", q.Name)
		}
		if q.Title == "" || q.Title == q.Name {
			t.Errorf("%s has no header title", q.Name)
		}
	}
}
