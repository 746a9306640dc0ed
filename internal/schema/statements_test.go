package schema_test

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/postgrescopy/postgrescopy/internal/schema"
)

func TestStatements(t *testing.T) {
	sql := "-- lead;\nCREATE a; SELECT 'x;''y'; SELECT \"q;\"; DO $$ b; $$; CREATE FUNCTION f() AS $t$ c; $x$ $t$;\n" +
		"/* d; */ SELECT $1; SELECT 1 -- e;\n;  ;\n-- only a comment;\n"
	assert.Equal(t, []string{
		"-- lead;\nCREATE a",
		"SELECT 'x;''y'",
		`SELECT "q;"`,
		"DO $$ b; $$",
		"CREATE FUNCTION f() AS $t$ c; $x$ $t$",
		"/* d; */ SELECT $1",
		"SELECT 1 -- e;",
	}, schema.Statements(sql))
}

// TestMigrationsSplitIntoStatements: on Citus every migration is sent one
// statement per message; each piece is one whole statement.
var statementStart = regexp.MustCompile(`(?s)^(--[^\n]*\n\s*)*(CREATE|ALTER|DROP|SELECT|DO|REVOKE|GRANT|COMMENT|INSERT|UPDATE|DELETE)\b`)

func TestMigrationsSplitIntoStatements(t *testing.T) {
	for _, m := range schema.Migrations() {
		stmts := schema.Statements(schema.Render(m.SQL, "otel"))
		assert.NotEmpty(t, stmts, m.Name)
		for _, s := range stmts {
			assert.Regexp(t, statementStart, s, "%s: a statement starts with a keyword", m.Name)
		}
	}
}
