package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/postgrescopy/postgrescopy/internal/pgwrite"
	"github.com/postgrescopy/postgrescopy/internal/rows"
	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
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
	name := twoUserSchema(ctx, t, pool)

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
	eachQueryReturnsRows(ctx, t, pool, qs)
}

// eachQueryReturnsRows runs each of qs in its own subtest, which fails when
// the query errs or finds nothing.
func eachQueryReturnsRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, qs []query) {
	t.Helper()
	for _, q := range qs {
		t.Run(q.Name, func(t *testing.T) {
			got, err := queryRows(ctx, pool, q.SQL)
			if err != nil {
				t.Fatalf("%s: %v", q.Title, err)
			}
			if len(got) == 0 {
				t.Fatalf("%s returned no rows", q.Title)
			}
			t.Logf("%s: %d rows", q.Title, len(got))
		})
	}
}

// TestQueriesRunAfterReset: the bench empties a schema between its runs
// (reset); every query must still run on what the next run writes. A reset
// that emptied the AI spend settings too left the ai_spend view without
// bounds, and the AI queries failed ("empty query does not return tuples").
func TestQueriesRunAfterReset(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	name := twoUserSchema(ctx, t, pool)
	if _, err := schema.Maintain(ctx, pool, name, exporterPartitioning); err != nil {
		t.Fatal(err)
	}
	b := &bench{pool: pool}
	if err := b.reset(ctx, name); err != nil {
		t.Fatal(err)
	}
	n, err := countRows(ctx, pool, name)
	if err != nil || n != 0 {
		t.Fatalf("after reset: %d rows (%v), want 0", n, err)
	}
	writeTwoUsers(ctx, t, pool, name)
	qs, err := loadQueries("../../queries", name)
	if err != nil {
		t.Fatal(err)
	}
	eachQueryReturnsRows(ctx, t, pool, qs)
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

// TestQueriesSameBeforeAndAfterContexts: every queries/*.sql returns the
// same rows, in the same order, from the same telemetry stored the way
// schema version 2 stored it (each row's context in its columns) and the way
// version 3 does (the context dictionary under views).
func TestQueriesSameBeforeAndAfterContexts(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	after := pgtest.Schema(t, pool)
	before := pgtest.Schema(t, pool)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if err := prepareSchema(ctx, conn.Conn(), after); err != nil {
		t.Fatal(err)
	}
	if _, err := schema.MigrateTo(ctx, conn.Conn(), before, 2); err != nil {
		t.Fatal(err)
	}
	for _, c := range schema.PromotedColumns(benchLayout) {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+schema.Qualified(before, c.Table)+" ADD COLUMN "+
			pgx.Identifier{c.Name}.Sanitize()+" "+c.Type); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := schema.Maintain(ctx, pool, before, exporterPartitioning); err != nil {
		t.Fatal(err)
	}

	writeTwoUsers(ctx, t, pool, after)
	// The same rows, each with its context, into the version 2 tables.
	for _, tb := range tables.Tables[:tables.NumSignalTables] {
		if _, err := pool.Exec(ctx, "INSERT INTO "+schema.Qualified(before, tb.Name)+" SELECT * FROM "+schema.Qualified(after, tb.Name)); err != nil {
			t.Fatalf("copy %s: %v", tb.Name, err)
		}
	}
	var inRows int64
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+schema.Qualified(after, "spans_rows")+" WHERE context_id IS NULL OR resource_attributes IS NOT NULL").Scan(&inRows); err != nil {
		t.Fatal(err)
	}
	if inRows != 0 {
		t.Fatalf("%d spans of version 3 hold their context themselves", inRows)
	}
	// Every column of every row reads the same through the views (the
	// copy above could not show it: it read them).
	for _, tb := range tables.Tables[:tables.NumSignalTables] {
		var same bool
		if err := pool.QueryRow(ctx, "SELECT (SELECT array_agg(t::text ORDER BY t::text) FROM "+schema.Qualified(before, tb.Name)+" t) = "+
			"(SELECT array_agg(t::text ORDER BY t::text) FROM (SELECT r.*, c.scope_name AS c1, c.scope_version AS c2, c.resource_attributes AS c3, "+
			"c.scope_attributes AS c4, c.resource_dropped_attributes_count AS c5, c.scope_dropped_attributes_count AS c6, "+
			"c.resource_schema_url AS c7, c.scope_schema_url AS c8 FROM "+schema.Qualified(after, tb.Store)+" r JOIN "+
			schema.Qualified(after, "contexts")+" c USING (context_id)) x, LATERAL (SELECT "+viewColumns(tb)+") t)").Scan(&same); err != nil {
			t.Fatal(err)
		}
		if !same {
			t.Fatalf("%s: the version 2 rows differ from the stored rows joined to their contexts", tb.Name)
		}
	}
	// The version 2 rows upgraded in place keep their own context columns;
	// the queries of later versions' functions (token_cost) need the rest.
	if _, err := schema.Migrate(ctx, conn.Conn(), before); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{before, after} {
		if _, err := schema.Maintain(ctx, pool, s, exporterPartitioning); err != nil {
			t.Fatal(err)
		}
	}

	results := func(s string, q query) []string {
		qs, err := loadQueries("../../queries", s)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range qs {
			if x.Name != q.Name {
				continue
			}
			out, err := queryRows(ctx, pool, x.SQL)
			if err != nil {
				t.Fatalf("%s on %s: %v", q.Title, s, err)
			}
			return out
		}
		t.Fatalf("no query %s", q.Name)
		return nil
	}
	qs, err := loadQueries("../../queries", after)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		t.Run(q.Name, func(t *testing.T) {
			a, b := results(before, q), results(after, q)
			if len(a) == 0 {
				t.Fatalf("%s returned no rows", q.Title)
			}
			if !slices.Equal(a, b) {
				t.Fatalf("%s differs:\nversion 2: %q\nversion 3: %q", q.Title, a, b)
			}
			t.Logf("%s: %d rows, identical", q.Title, len(a))
		})
	}
}

// viewColumns selects, from x (a stored row with its context as c1..c8), the
// columns of a version 2 row of tb in their order.
func viewColumns(tb tables.Table) string {
	var cols []string
	for _, c := range benchLayout.Table(slices.IndexFunc(tables.Tables[:], func(t tables.Table) bool { return t.Name == tb.Name })).Columns {
		if c == tables.ContextID {
			for i := range tables.ContextColumns {
				cols = append(cols, fmt.Sprintf("x.c%d AS %s", i+1, tables.ContextColumns[i]))
			}
			continue
		}
		if strings.HasSuffix(c, tables.LongSuffix) {
			continue // merged into its jsonb below, as the views do
		}
		q := "x." + pgx.Identifier{c}.Sanitize()
		if l := c + tables.LongSuffix; slices.Contains(benchLayout.Table(slices.IndexFunc(tables.Tables[:], func(t tables.Table) bool { return t.Name == tb.Name })).Columns, l) {
			lq := "x." + pgx.Identifier{l}.Sanitize()
			q = "CASE WHEN " + lq + " IS NULL THEN " + q + " ELSE " + q + " || jsonb_object(" + lq + ") END AS " + pgx.Identifier{c}.Sanitize()
		}
		cols = append(cols, q)
	}
	return strings.Join(cols, ", ")
}

// preparedSchema is a new, empty schema, prepared as the exporter prepares
// it.
func preparedSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := pgtest.Schema(t, pool)
	prepareNamed(ctx, t, pool, name)
	return name
}

// prepareNamed prepares schema name as the exporter prepares it.
func prepareNamed(ctx context.Context, t *testing.T, pool *pgxpool.Pool, name string) {
	t.Helper()
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	err = prepareSchema(ctx, conn.Conn(), name)
	conn.Release()
	if err != nil {
		t.Fatal(err)
	}
}

// twoUserSchema is a new schema, prepared as the exporter prepares it,
// holding two loadgen users' telemetry.
func twoUserSchema(ctx context.Context, t *testing.T, pool *pgxpool.Pool) string {
	t.Helper()
	name := preparedSchema(ctx, t, pool)
	writeTwoUsers(ctx, t, pool, name)
	return name
}

// querier is a pool, a connection or a transaction.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

// queryRows is every row of sql, each its values printed.
func queryRows(ctx context.Context, db querier, sql string) ([]string, error) {
	r, err := db.Query(ctx, sql)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var out []string
	for r.Next() {
		v, err := r.Values()
		if err != nil {
			return nil, err
		}
		out = append(out, fmt.Sprint(v...))
	}
	return out, r.Err()
}

// writeTwoUsers writes two loadgen users' rows (seed 1) into schemaName
// through the exporter's writer.
func writeTwoUsers(ctx context.Context, t *testing.T, pool *pgxpool.Pool, schemaName string) {
	t.Helper()
	gen, err := loadgenreceiver.NewGenerator(loadgenConfig(2, 1900, 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	w := pgwrite.NewLayoutWriter(pool, schemaName, benchLayout)
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
}

// rewrittenQueries are queries/ rewritten for speed, each with the plain
// formulation it replaced: the two must return the same rows in the same order.
var rewrittenQueries = map[string]string{
	"error_rates": `SELECT service_name,
       span_name,
       count(*) AS spans,
       count(*) FILTER (WHERE status_code = 'Error') AS errors,
       round(100.0 * count(*) FILTER (WHERE status_code = 'Error') / count(*), 2) AS error_pct,
       mode() WITHIN GROUP (ORDER BY span_attributes ->> 'error.type')
           FILTER (WHERE status_code = 'Error') AS top_error_type
FROM otel.spans
WHERE start_time > now() - interval '24 hours' AND start_time <= now()
GROUP BY service_name, span_name
HAVING count(*) FILTER (WHERE status_code = 'Error') > 0
ORDER BY error_pct DESC, errors DESC, service_name, span_name`,
}

// TestRewrittenQueriesSame runs each rewritten query and the formulation it
// replaced on two loadgen users' telemetry.
func TestRewrittenQueriesSame(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	name := twoUserSchema(ctx, t, pool)
	// Error types that tie and differ between operations, and one on every
	// span that did not fail: a rewrite that counted them over other spans
	// or broke ties otherwise would show.
	if _, err := pool.Exec(ctx, "UPDATE "+schema.Qualified(name, "spans_rows")+
		` SET span_attributes = span_attributes || jsonb_build_object('error.type', CASE WHEN status_code = 'Error'
		   THEN (ARRAY['429', '500', 'timeout'])[1 + (span_id & 255)::int % 3] ELSE '000' END)
		 `); err != nil {
		t.Fatal(err)
	}
	qs, err := loadQueries("../../queries", name)
	if err != nil {
		t.Fatal(err)
	}
	rowsOf := func(sql string) []string {
		out, err := queryRows(ctx, pool, sql)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	for qname, plain := range rewrittenQueries {
		i := slices.IndexFunc(qs, func(q query) bool { return q.Name == qname })
		if i < 0 {
			t.Fatalf("no queries/%s.sql", qname)
		}
		got := rowsOf(qs[i].SQL)
		want := rowsOf(schemaRef.ReplaceAllString(plain, pgx.Identifier{name}.Sanitize()+".$1"))
		if len(want) < 2 {
			t.Fatalf("%s: %d rows, too few to compare", qname, len(want))
		}
		if !slices.Equal(got, want) {
			t.Fatalf("%s differs from its plain formulation:\ngot:  %q\nwant: %q", qname, got, want)
		}
		t.Logf("%s: %d rows, identical", qname, len(got))
	}
}

// TestQueriesSameWithLongStringsApart: every query of queries/ returns the
// same rows whether the attributes' long strings are stored apart (schema
// 9, as the exporter writes them) or in the jsonb (as schema 8 stored
// them: the same rows, merged back in place).
func TestQueriesSameWithLongStringsApart(t *testing.T) {
	if testing.Short() {
		t.Skip("needs PostgreSQL")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pool := pgtest.Pool(t)
	apart := twoUserSchema(ctx, t, pool)
	// The same rows in a second schema (the capture trigger computes its
	// AI spend partials as they go in), then merged there.
	merged := preparedSchema(ctx, t, pool)
	for _, tb := range tables.Tables {
		if _, err := pool.Exec(ctx, "INSERT INTO "+schema.Qualified(merged, tb.Store)+" SELECT * FROM "+schema.Qualified(apart, tb.Store)); err != nil {
			t.Fatalf("copy %s: %v", tb.Store, err)
		}
	}
	var long int64
	for _, c := range [][2]string{{"spans_rows", "span_attributes"}, {"logs_rows", "log_attributes"}} {
		tq, a, l := schema.Qualified(merged, c[0]), pgx.Identifier{c[1]}.Sanitize(), pgx.Identifier{c[1] + tables.LongSuffix}.Sanitize()
		tag, err := pool.Exec(ctx, "UPDATE "+tq+" SET "+a+" = "+a+" || jsonb_object("+l+"), "+l+" = NULL WHERE "+l+" IS NOT NULL")
		if err != nil {
			t.Fatal(err)
		}
		long += tag.RowsAffected()
	}
	if long < 100 {
		t.Fatalf("only %d rows with long strings apart: the comparison would say little", long)
	}
	for _, s := range []string{apart, merged} {
		if _, err := schema.Maintain(ctx, pool, s, exporterPartitioning); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE "+schema.Qualified(s, "spans_rows")); err != nil {
			t.Fatal(err)
		}
	}
	// What the queries read of the attributes, every column of every row:
	// the views read the same.
	for _, v := range []string{"spans", "logs", "gen_ai_calls"} {
		if !sameRows(ctx, t, pool, apart, merged, v) {
			t.Fatalf("%s reads differently with the long strings apart", v)
		}
	}
	qa, err := loadQueries("../../queries", apart)
	if err != nil {
		t.Fatal(err)
	}
	qm, err := loadQueries("../../queries", merged)
	if err != nil {
		t.Fatal(err)
	}
	for i, q := range qa {
		t.Run(q.Name, func(t *testing.T) {
			a, err := queryRows(ctx, pool, q.SQL)
			if err != nil {
				t.Fatalf("%s: %v", q.Title, err)
			}
			m, err := queryRows(ctx, pool, qm[i].SQL)
			if err != nil {
				t.Fatalf("%s: %v", q.Title, err)
			}
			if len(a) == 0 {
				t.Fatalf("%s returned no rows", q.Title)
			}
			if !slices.Equal(a, m) {
				t.Fatalf("%s differs:\napart:  %q\nmerged: %q", q.Title, a, m)
			}
		})
	}
}

// sameRows says whether view reads the same rows (every column, as text) in
// schemas a and b.
func sameRows(ctx context.Context, t *testing.T, pool *pgxpool.Pool, a, b, view string) bool {
	t.Helper()
	var same bool
	if err := pool.QueryRow(ctx, "SELECT (SELECT array_agg(t::text ORDER BY t::text) FROM "+schema.Qualified(a, view)+" t) = "+
		"(SELECT array_agg(t::text ORDER BY t::text) FROM "+schema.Qualified(b, view)+" t)").Scan(&same); err != nil {
		t.Fatal(err)
	}
	return same
}
