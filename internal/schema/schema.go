package schema

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

//go:embed sql/*.sql
var files embed.FS

//go:embed indexes/indexes.sql
var indexesSQL string

//go:embed roles/writer.sql
var writerSQL string

// WriterGrants is the SQL that gives role the least privileges the exporter
// needs with create_schema: false (also printed in the README).
func WriterGrants(schemaName, role string) string {
	return strings.ReplaceAll(Render(writerSQL, schemaName), "{{role}}", pgx.Identifier{role}.Sanitize())
}

// Version reads the schema's version; 0 when it has none.
func Version(ctx context.Context, conn *pgx.Conn, schemaName string) (int, error) {
	var v int
	err := conn.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+Qualified(schemaName, "schema_version")).Scan(&v)
	if err != nil {
		return 0, fmt.Errorf("read schema version of %q: %w", schemaName, err)
	}
	return v, nil
}

// Migration is one versioned DDL step.
type Migration struct {
	Version int
	Name    string
	SQL     string // with {{schema}} placeholders
}

// Migrations returns every embedded migration in version order.
func Migrations() []Migration {
	entries, err := fs.ReadDir(files, "sql")
	if err != nil {
		panic(err) // the embed is fixed at build time
	}
	var out []Migration
	for _, ent := range entries {
		name := ent.Name()
		v, err := strconv.Atoi(strings.SplitN(name, "_", 2)[0])
		if err != nil {
			panic(fmt.Sprintf("schema: migration %q lacks a numeric prefix", name))
		}
		b, err := files.ReadFile("sql/" + name)
		if err != nil {
			panic(err)
		}
		out = append(out, Migration{Version: v, Name: name, SQL: string(b)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
	return out
}

// Latest is the schema version this binary writes.
func Latest() int {
	m := Migrations()
	return m[len(m)-1].Version
}

var identRe = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)

// ValidIdentifier reports whether s is an acceptable schema or table name: a
// plain SQL identifier of at most 63 bytes. It is quoted anyway wherever used.
func ValidIdentifier(s string) bool { return identRe.MatchString(s) }

// Render replaces the {{schema}} placeholder with the quoted schema name, and
// {{schema_lit}} with the name as a string literal (for format('%I') in
// PL/pgSQL). Names are validated identifiers, so quoting is belt and braces.
func Render(sql, schemaName string) string {
	lit := "'" + strings.ReplaceAll(schemaName, "'", "''") + "'"
	sql = strings.ReplaceAll(sql, "{{schema_lit}}", lit)
	return strings.ReplaceAll(sql, "{{schema}}", pgx.Identifier{schemaName}.Sanitize())
}

// Qualified returns schema.table, both quoted.
func Qualified(schemaName, table string) string {
	return pgx.Identifier{schemaName, table}.Sanitize()
}

// lockKey derives the advisory lock key from the schema name, so that
// different schemas in one database migrate independently.
func lockKey(schemaName string) int64 {
	h := fnv.New64a()
	h.Write([]byte("postgrescopy/" + schemaName))
	return int64(h.Sum64())
}

// ErrNewerSchema is returned when the database was migrated by a newer binary.
var ErrNewerSchema = errors.New("schema is newer than this postgrescopy")

// ErrForeignSchema is returned when the schema's recorded migrations are not
// this binary's (a pre-release build's, or another program's schema_version):
// applying the next migration on top could only break it.
var ErrForeignSchema = errors.New("schema was not made by this postgrescopy's migrations")

// checkApplied compares the migrations recorded in vt with this binary's
// of the same versions.
func checkApplied(ctx context.Context, tx pgx.Tx, vt, q string) error {
	known := map[int]string{}
	for _, m := range Migrations() {
		known[m.Version] = m.Name
	}
	rows, err := tx.Query(ctx, "SELECT version, name FROM "+vt+" ORDER BY version")
	if err != nil {
		return fmt.Errorf("read %s: %w", vt, err)
	}
	defer rows.Close()
	for rows.Next() {
		var v int
		var name string
		if err := rows.Scan(&v, &name); err != nil {
			return fmt.Errorf("read %s: %w", vt, err)
		}
		if want, ok := known[v]; ok && want != name {
			return fmt.Errorf("%w: %s records migration %d as %q where this binary has %q (made by a pre-release build?): "+
				"drop it (DROP SCHEMA %s CASCADE) or set schema to another name", ErrForeignSchema, q, v, name, want, q)
		}
	}
	return rows.Err()
}

// ErrMissing is a schema without the tables or columns this binary writes,
// or at an older version (create_schema: false).
var ErrMissing = errors.New("schema is missing tables or columns")

// Result says what Migrate did.
type Result struct {
	From, To int
	LZ4      bool
}

// Migrate brings schemaName up to Latest in one transaction, holding a
// transaction-scoped advisory lock so that concurrent starters wait for the
// first one and then find nothing left to do.
func Migrate(ctx context.Context, conn *pgx.Conn, schemaName string) (Result, error) {
	return MigrateTo(ctx, conn, schemaName, Latest())
}

// MigrateTo applies the migrations up to version target only: tests use it
// to build an old schema and check the upgrade from it.
func MigrateTo(ctx context.Context, conn *pgx.Conn, schemaName string, target int) (Result, error) {
	var res Result
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schemaName)); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		q := pgx.Identifier{schemaName}.Sanitize()
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+q); err != nil {
			return fmt.Errorf("create schema %s: %w", q, err)
		}
		vt := Qualified(schemaName, "schema_version")
		if _, err := tx.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+vt+
			" (version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())"); err != nil {
			return fmt.Errorf("create %s: %w", vt, err)
		}
		if err := tx.QueryRow(ctx, "SELECT coalesce(max(version), 0) FROM "+vt).Scan(&res.From); err != nil {
			return fmt.Errorf("read %s: %w", vt, err)
		}
		res.To = res.From
		if err := checkApplied(ctx, tx, vt, q); err != nil {
			return err
		}
		latest := Latest()
		if res.From > latest {
			return fmt.Errorf("%w: %s is at version %d, this binary knows up to %d; upgrade the collector", ErrNewerSchema, q, res.From, latest)
		}
		citus, err := onCitus(ctx, tx)
		if err != nil {
			return fmt.Errorf("check for citus: %w", err)
		}
		for _, m := range Migrations() {
			if m.Version <= res.From || m.Version > target {
				continue
			}
			if err := execScript(ctx, tx, "apply migration "+m.Name, Render(m.SQL, schemaName), citus); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, "INSERT INTO "+vt+" (version, name) VALUES ($1, $2)", m.Version, m.Name); err != nil {
				return fmt.Errorf("record migration %s: %w", m.Name, err)
			}
			res.To = m.Version
		}
		if res.To == res.From {
			return nil
		}
		lz4, err := useLZ4(ctx, tx, schemaName)
		res.LZ4 = lz4
		return err
	})
	return res, err
}

// useLZ4 switches the compressible columns of our tables to lz4 TOAST
// compression when the server was built with it: on ~3 KB jsonb values the
// default pglz was the largest single ingest cost.
func useLZ4(ctx context.Context, tx pgx.Tx, schemaName string) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, `SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'`).Scan(&ok)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && !ok) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("check lz4 support: %w", err)
	}
	rows, err := tx.Query(ctx, `
SELECT c.relname, a.attname
FROM pg_attribute a
JOIN pg_class c ON c.oid = a.attrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_type t ON t.oid = a.atttypid
WHERE n.nspname = $1 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
  AND t.typstorage <> 'p' AND a.attcompression <> 'l'
ORDER BY 1, 2`, schemaName)
	if err != nil {
		return false, fmt.Errorf("list columns for lz4: %w", err)
	}
	type col struct{ table, column string }
	var todo []col
	for rows.Next() {
		var c col
		if err := rows.Scan(&c.table, &c.column); err != nil {
			rows.Close()
			return false, err
		}
		todo = append(todo, c)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return false, err
	}
	for _, c := range todo {
		sql := "ALTER TABLE " + Qualified(schemaName, c.table) + " ALTER COLUMN " +
			pgx.Identifier{c.column}.Sanitize() + " SET COMPRESSION lz4"
		if _, err := tx.Exec(ctx, sql); err != nil {
			return false, fmt.Errorf("set lz4 on %s.%s: %w", c.table, c.column, err)
		}
	}
	return true, nil
}

// Missing lists, as "table" or "table.column", what of want (table name to
// columns) does not exist in schemaName or cannot be inserted into by the
// current role.
func Missing(ctx context.Context, conn *pgx.Conn, schemaName string, want map[string][]string) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT c.table_name, c.column_name,
       has_column_privilege(quote_ident(c.table_schema) || '.' || quote_ident(c.table_name), c.column_name, 'INSERT')
FROM information_schema.columns c
WHERE c.table_schema = $1`, schemaName)
	if err != nil {
		return nil, fmt.Errorf("read columns of schema %q: %w", schemaName, err)
	}
	have := map[string]map[string]bool{}
	for rows.Next() {
		var t, col string
		var canInsert bool
		if err := rows.Scan(&t, &col, &canInsert); err != nil {
			rows.Close()
			return nil, err
		}
		if have[t] == nil {
			have[t] = map[string]bool{}
		}
		have[t][col] = canInsert
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, err
	}
	var missing []string
	tables := make([]string, 0, len(want))
	for t := range want {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	for _, t := range tables {
		cols, ok := have[t]
		if !ok {
			missing = append(missing, t+" (table missing or not visible)")
			continue
		}
		for _, col := range want[t] {
			canInsert, ok := cols[col]
			switch {
			case !ok:
				missing = append(missing, t+"."+col+" (column missing)")
			case !canInsert:
				missing = append(missing, t+"."+col+" (no INSERT privilege)")
			}
		}
	}
	return missing, nil
}

var indexNameRe = regexp.MustCompile(`(?m)^CREATE INDEX IF NOT EXISTS (\w+) ON`)

// IndexNames lists the indexes of the query index set.
func IndexNames() []string {
	var out []string
	for _, m := range indexNameRe.FindAllStringSubmatch(indexesSQL, -1) {
		out = append(out, m[1])
	}
	return out
}

// SetIndexes creates the query index set when on, and drops it when off.
// Creating is idempotent; on a large existing table the first creation
// takes as long as building the index.
// It holds the migration lock, so replicas starting together do it once.
func SetIndexes(ctx context.Context, conn *pgx.Conn, schemaName string, on bool) error {
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", lockKey(schemaName)); err != nil {
			return fmt.Errorf("take migration lock: %w", err)
		}
		citus, err := onCitus(ctx, tx)
		if err != nil {
			return fmt.Errorf("check for citus: %w", err)
		}
		if on {
			return execScript(ctx, tx, "create indexes", Render(indexesSQL, schemaName), citus)
		}
		var drop strings.Builder
		for _, name := range IndexNames() {
			drop.WriteString("DROP INDEX IF EXISTS " + Qualified(schemaName, name) + ";\n")
		}
		return execScript(ctx, tx, "drop indexes", drop.String(), citus)
	})
}
