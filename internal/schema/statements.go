package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statements splits a DDL script into its statements, at the semicolons
// outside quotes, quoted identifiers, dollar-quoted bodies and comments. A
// statement keeps its leading comments; empty ones are dropped.
func Statements(sql string) []string {
	var out []string
	start := 0
	emit := func(end int) {
		if stmt := strings.TrimSpace(sql[start:end]); stmt != "" && !onlyComments(stmt) {
			out = append(out, stmt)
		}
		start = end + 1
	}
	for i := 0; i < len(sql); i++ {
		switch c := sql[i]; {
		case c == ';':
			emit(i)
		case c == '\'' || c == '"':
			i = skipQuoted(sql, i, c)
		case c == '-' && strings.HasPrefix(sql[i:], "--"):
			if j := strings.IndexByte(sql[i:], '\n'); j >= 0 {
				i += j
			} else {
				i = len(sql)
			}
		case c == '/' && strings.HasPrefix(sql[i:], "/*"):
			if j := strings.Index(sql[i+2:], "*/"); j >= 0 {
				i += j + 3
			} else {
				i = len(sql)
			}
		case c == '$':
			if tag, ok := dollarTag(sql[i:]); ok {
				if j := strings.Index(sql[i+len(tag):], tag); j >= 0 {
					i += len(tag) + j + len(tag) - 1
				} else {
					i = len(sql)
				}
			}
		}
	}
	if start < len(sql) {
		emit(len(sql))
	}
	return out
}

// skipQuoted returns the index of the quote that closes the one at i (a
// doubled quote is part of the value).
func skipQuoted(sql string, i int, q byte) int {
	for j := i + 1; j < len(sql); j++ {
		if sql[j] == q {
			if j+1 < len(sql) && sql[j+1] == q {
				j++
				continue
			}
			return j
		}
	}
	return len(sql)
}

// dollarTag reads a dollar quote's opening tag ($$ or $name$) at s's start;
// a positional parameter ($1) is not one.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || j > 1 && c >= '0' && c <= '9':
		default:
			return "", false
		}
	}
	return "", false
}

func onlyComments(stmt string) bool {
	for _, line := range strings.Split(stmt, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			return false
		}
	}
	return true
}

// StepError is a DDL statement the server refused: which script, which
// statement, and why. An operator reads it instead of a connection error.
type StepError struct {
	Script    string // the migration's file name, or what the DDL is for
	N         int    // the statement's number in the script, from 1
	Statement string // its first line
	Err       error
}

func (e *StepError) Error() string {
	msg := e.Script
	if e.N > 0 {
		msg += fmt.Sprintf(": statement %d (%s)", e.N, e.Statement)
	}
	msg += ": " + e.Err.Error()
	// The server's hint (the commands that fix an earlier distribution, in
	// citus/distribute.sql) is not in a PgError's text.
	var pgErr *pgconn.PgError
	if errors.As(e.Err, &pgErr) && pgErr.Hint != "" {
		msg += "; hint: " + pgErr.Hint
	}
	return msg
}

func (e *StepError) Unwrap() error { return e.Err }

// CitusModifyMode is the Citus setting that makes a statement on a
// distributed table use one connection per worker, sequentially, instead
// of one per shard in parallel.
const CitusModifyMode = "citus.multi_shard_modify_mode"

// onCitus reports whether tx's database has the citus extension: DDL there
// is sent one statement per message (Citus propagates a statement's text to
// the workers, and refuses several in one), in sequential mode (parallel
// DDL on a distributed table's shards can deadlock, and Citus refuses an
// index whose shard names are long for that reason).
func onCitus(ctx context.Context, tx pgx.Tx) (bool, error) {
	var ok bool
	err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')").Scan(&ok)
	return ok, err
}

// execScript runs sql in tx: at once on one PostgreSQL, statement by
// statement in sequential mode on Citus. A refused statement is a StepError.
func execScript(ctx context.Context, tx pgx.Tx, script, sql string, citus bool) error {
	if !citus {
		if _, err := tx.Exec(ctx, sql); err != nil {
			return refused(script, 0, "", err)
		}
		return nil
	}
	if _, err := tx.Exec(ctx, "SET LOCAL "+CitusModifyMode+" TO 'sequential'"); err != nil {
		return fmt.Errorf("%s: set sequential mode: %w", script, err)
	}
	for i, stmt := range Statements(sql) {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return refused(script, i+1, firstLine(stmt), err)
		}
	}
	return nil
}

// refused wraps a server's refusal as a StepError; other errors (a lost
// connection) are returned as they are, to be retried.
func refused(script string, n int, stmt string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("%s: %w", script, err)
	}
	return &StepError{Script: script, N: n, Statement: stmt, Err: err}
}

// firstLine is a statement's first line that is not a comment.
func firstLine(stmt string) string {
	for _, line := range strings.Split(stmt, "\n") {
		if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "--") {
			if len(l) > 120 {
				l = l[:120] + "..."
			}
			return l
		}
	}
	return ""
}
