package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The breakdown names every statement a flush sends, old and new writes
// alike, and keeps the rest apart.
func TestStatementKind(t *testing.T) {
	for q, want := range map[string]string{
		"BEGIN":                       "BEGIN",
		"SET LOCAL work_mem = '64MB'": "SET LOCAL work_mem",
		"commit":                      "COMMIT",
		`INSERT INTO "s"."ledger" (stream, entry_id) SELECT $1, unnest($2::text[])`:                                             "ledger insert",
		`INSERT INTO "s"."contexts" ("context_id") VALUES ($1) ON CONFLICT DO NOTHING`:                                          "context dictionary insert",
		`LOCK TABLE ONLY "s"."spans_rows" IN ROW EXCLUSIVE MODE`:                                                                "partition claim: locks",
		`SELECT b[1]::timestamptz FROM (SELECT regexp_match(pg_get_expr(lf.relpartbound, lf.oid), '') AS b FROM pg_class lf) p`: "partition claim: bounds",
		`COPY "s"."spans_p20261204_2100" ("start_time") FROM STDIN WITH (FORMAT binary)`:                                        "COPY spans (partition)",
		`COPY "s"."logs_rows" ("time") FROM STDIN WITH (FORMAT binary)`:                                                         "COPY logs_rows",
		"TRUNCATE x": "other (start-up, maintenance, coordination, bench)",
	} {
		got, _ := statementKind(q, true)
		require.Equal(t, want, got, q)
	}
	got, perFlush := statementKind("INSERT INTO s.ai_spend_partial SELECT ...", false)
	require.Equal(t, "AI spend capture (trigger)", got)
	require.True(t, perFlush)
	_, perFlush = statementKind("TRUNCATE x", true)
	require.False(t, perFlush)
}
