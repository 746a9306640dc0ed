package pgwrite

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumererror"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// TestClassify covers every class with the SQLSTATEs PostgreSQL raises for
// it; the errors are built, not provoked, so no server is needed.
func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code, what string
		want       Class
	}{
		// Data: the rows themselves; isolate them.
		{"22001", "string_data_right_truncation", Data},
		{"22003", "numeric_value_out_of_range", Data},
		{"22008", "datetime_field_overflow (timestamp out of range)", Data},
		{"22021", "character_not_in_repertoire (NUL, invalid UTF-8)", Data},
		{"22P02", "invalid_text_representation (bad jsonb)", Data},
		{"22P05", "untranslatable_character (\\u0000 in jsonb)", Data},
		{"23502", "not_null_violation", Data},
		{"23505", "unique_violation", Data},
		{"23514", "check_violation, and no partition for a row", Data},
		{"54000", "program_limit_exceeded (jsonb or array too large)", Data},
		// Retryable: the server, the connection or a conflict.
		{"08000", "connection_exception", Retryable},
		{"08006", "connection_failure", Retryable},
		{"53300", "too_many_connections", Retryable},
		{"53100", "disk_full", Retryable},
		{"57P01", "admin_shutdown", Retryable},
		{"57P02", "crash_shutdown", Retryable},
		{"57P03", "cannot_connect_now (starting up)", Retryable},
		{"57014", "query_canceled (statement_timeout)", Retryable},
		{"55P03", "lock_not_available (lock_timeout)", Retryable},
		{"40001", "serialization_failure", Retryable},
		{"40P01", "deadlock_detected", Retryable},
		{"XX000", "internal_error: unknown, so retried within retry_on_failure", Retryable},
		// Config: an operator must act.
		{"28P01", "invalid_password", Config},
		{"28000", "invalid_authorization_specification", Config},
		{"3D000", "invalid_catalog_name (no such database)", Config},
		{"3F000", "invalid_schema_name", Config},
		{"42P01", "undefined_table (create_schema: false, DDL not applied)", Config},
		{"42703", "undefined_column", Config},
		{"42501", "insufficient_privilege", Config},
	} {
		t.Run(tc.code, func(t *testing.T) {
			err := &pgconn.PgError{Code: tc.code, Message: tc.what}
			require.Equal(t, tc.want, Classify(err), tc.what)
			// Wrapping, as the writer does, keeps the class.
			require.Equal(t, tc.want, Classify(fmt.Errorf("copy into spans: %w", err)))
			if tc.want == Config {
				require.NotEmpty(t, Hint(err), "a config error says how to fix it")
			} else {
				require.Empty(t, Hint(err))
			}
		})
	}
}

func TestClassifyNonServerErrors(t *testing.T) {
	for name, err := range map[string]error{
		"connect":     &pgconn.ConnectError{},
		"network":     &net.OpError{Op: "read", Err: errors.New("connection reset by peer")},
		"eof":         io.ErrUnexpectedEOF,
		"deadline":    context.DeadlineExceeded,
		"canceled":    context.Canceled,
		"not started": errors.New("waiting for PostgreSQL"),
	} {
		require.Equal(t, Retryable, Classify(err), name)
	}
	require.Equal(t, "retryable", Retryable.String())
	require.Equal(t, "data", Data.String())
	require.Equal(t, "config", Config.String())
}

func TestHintsNameTheFix(t *testing.T) {
	for code, want := range map[string]string{
		"28P01": "password",
		"3D000": "does not exist",
		"42P01": "create_schema: true",
		"42703": "create_schema: true",
		"42501": "grant",
	} {
		require.Contains(t, Hint(&pgconn.PgError{Code: code}), want, code)
	}
}

func TestRefusedRow(t *testing.T) {
	sp := span{lo: 10, hi: 20}
	for _, tc := range []struct {
		where string
		row   int
		ok    bool
	}{
		{"COPY spans, line 1", 10, true},
		{"COPY spans, line 10, column span_name", 19, true},
		{"PL/pgSQL function f() line 3 at RAISE\nCOPY spans, line 4", 13, true},
		{"COPY spans, line 11", 0, false}, // past the run: distrust it
		{"COPY spans, line 0", 0, false},
		{"COPY logs, line 2", 0, false},   // another table
		{"COPY spans, Zeile 2", 0, false}, // translated
		{"COPY spans, line 2x", 0, false}, // not a number
		{"", 0, false},
	} {
		row, ok := refusedRow(&pgconn.PgError{Code: "23514", Where: tc.where}, "spans", sp)
		require.Equal(t, tc.ok, ok, tc.where)
		require.Equal(t, tc.row, row, tc.where)
	}
	_, ok := refusedRow(errors.New("COPY spans, line 1"), "spans", sp)
	require.False(t, ok, "only a server error has a context")
}

func TestDescribe(t *testing.T) {
	long := make([]byte, 5000)
	for i := range long {
		long[i] = 'd'
	}
	code, msg, detail := describe(fmt.Errorf("copy: %w", &pgconn.PgError{Code: "23514", Message: "violates", Detail: string(long)}))
	require.Equal(t, "23514", code)
	require.Equal(t, "violates", msg)
	require.LessOrEqual(t, len(detail), maxDetail)
	require.Contains(t, detail, "[postgrescopy: truncated from 5000 bytes]")

	code, msg, _ = describe(&notIsolated{last: &pgconn.PgError{Code: "23514", Message: "violates"}})
	require.Equal(t, "23514", code)
	require.Contains(t, msg, "not isolated")
	require.Contains(t, msg, "violates")
	require.ErrorIs(t, &notIsolated{}, ErrNotIsolated)
}

// The errors that are not PostgreSQL's get their class from the same
// function, and Outcome and ConsumerError follow from it.
func TestClassifyOwnErrors(t *testing.T) {
	wrapped := func(err error) error { return fmt.Errorf("flush 3 entries of s: %w", err) }
	for _, tc := range []struct {
		err       error
		want      Class
		outcome   string
		permanent bool
	}{
		{wrapped(entry.ErrMalformed), Data, "damaged", true},
		{wrapped(schema.ErrNewerSchema), Config, "config", false},
		{wrapped(schema.ErrMissing), Config, "config", false},
		{wrapped(schema.ErrColumnType), Config, "config", false},
		{wrapped(schema.ErrNoCitus), Config, "config", false},
		{wrapped(consumererror.NewPermanent(errors.New("too large"))), Permanent, "permanent", true},
		{wrapped(ErrAlreadyCommitted), Retryable, "duplicate", false},
		{wrapped(&pgconn.PgError{Code: "22P02"}), Data, "data", true},
		{wrapped(&pgconn.PgError{Code: "42501"}), Config, "config", false},
		{wrapped(io.ErrUnexpectedEOF), Retryable, "retryable", false},
	} {
		require.Equal(t, tc.want, Classify(tc.err), "%v", tc.err)
		require.Equal(t, tc.outcome, Outcome(tc.err), "%v", tc.err)
		require.Equal(t, tc.permanent, consumererror.IsPermanent(ConsumerError(tc.err)), "%v", tc.err)
		require.ErrorIs(t, ConsumerError(tc.err), tc.err)
	}
	require.Equal(t, "written", Outcome(nil))
}

// TestClassifyCitus: a Citus coordinator re-raises a worker's COPY refusal as
// XX000 from ReportCopyError (the worker's message, no SQLSTATE, no line): a
// data error. Any other XX000 stays retryable.
func TestClassifyCitus(t *testing.T) {
	forwarded := &pgconn.PgError{Code: "XX000", Routine: "ReportCopyError", File: "multi_copy.c",
		Message: `new row for relation "spans_p20261201_0000_104063" violates check constraint "no_poison"`}
	require.Equal(t, Data, Classify(fmt.Errorf("copy into spans: %w", forwarded)))
	require.True(t, CitusForwarded(forwarded))
	other := &pgconn.PgError{Code: "XX000", Routine: "elog_start", Message: "cache lookup failed"}
	require.Equal(t, Retryable, Classify(other))
	require.False(t, CitusForwarded(other))
	_, ok := refusedRow(&pgconn.PgError{Code: "XX000", Routine: "ReportCopyError", Where: "COPY spans, line 500"}, "spans", span{0, 500})
	require.False(t, ok, "a coordinator's line is where it was reading, not the refused row")
}

// TestClassifySchemaStep: a DDL statement the server refuses needs an
// operator (the error names the statement); a lost connection during one is
// retried.
func TestClassifySchemaStep(t *testing.T) {
	refused := &schema.StepError{Script: "apply migration 002_ai_spend.sql", N: 4, Statement: "CREATE INDEX ...",
		Err: &pgconn.PgError{Code: "42601", Message: "cannot insert multiple commands into a prepared statement"}}
	require.Equal(t, Config, Classify(refused))
	require.NotEmpty(t, Hint(refused))
	require.Contains(t, refused.Error(), "apply migration 002_ai_spend.sql: statement 4 (CREATE INDEX ...)")
	lost := &schema.StepError{Script: "create indexes", Err: &pgconn.PgError{Code: "57P01", Message: "terminating connection"}}
	require.Equal(t, Retryable, Classify(lost))
}

// TestLedgerConflict: the ledger's key conflict by SQLSTATE and constraint
// family, on one node and on a Citus worker's shard (where the coordinator
// forwards the message alone).
func TestLedgerConflict(t *testing.T) {
	for _, tc := range []struct {
		err  *pgconn.PgError
		want bool
	}{
		{&pgconn.PgError{Code: "23505", ConstraintName: "ledger_pkey"}, true},
		{&pgconn.PgError{Code: "23505", ConstraintName: "ledger_pkey_104027"}, true},
		{&pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "ledger_pkey_104027"`}, true},
		{&pgconn.PgError{Code: "23505", Message: `doppelter Schlüsselwert verletzt Unique-Constraint »ledger_pkey_7«`}, true},
		{&pgconn.PgError{Code: "23505", Message: `duplicate key value violates unique constraint "xledger_pkey"`}, false},
		{&pgconn.PgError{Code: "23505", ConstraintName: "ledger_pkey_x"}, false},
		{&pgconn.PgError{Code: "23505", ConstraintName: "other_pkey_1"}, false},
		{&pgconn.PgError{Code: "23514", ConstraintName: "ledger_pkey"}, false},
	} {
		require.Equal(t, tc.want, ledgerConflict(fmt.Errorf("insert: %w", tc.err)), "%+v", tc.err)
	}
}
