package pgwrite

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"go.opentelemetry.io/collector/consumer/consumererror"

	"github.com/postgrescopy/postgrescopy/internal/entry"
	"github.com/postgrescopy/postgrescopy/internal/schema"
)

// Class says what to do about an error: the one classification every
// caller (direct push, flush workers, start, telemetry) uses.
type Class int

const (
	// Retryable errors may succeed later: the server is unreachable,
	// restarting, out of connections, or a lock or serialization conflict.
	Retryable Class = iota
	// Data errors are caused by the rows themselves (or a damaged stream
	// entry); retrying the same rows cannot succeed: isolate them.
	Data
	// Config errors need an operator: wrong credentials, missing database,
	// missing table, column or permission, a schema of another version.
	// Start refuses them with the fix; a write keeps retrying meanwhile.
	Config
	// Permanent errors can never succeed (a request the Collector marked
	// permanent): drop, counted.
	Permanent
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Data:
		return "data"
	case Config:
		return "config"
	default:
		return "permanent"
	}
}

// SQLSTATEs and classes named in the classification.
const (
	classConnection        = "08"
	classDataException     = "22"
	classIntegrity         = "23"
	classResources         = "53"
	classOperatorIntervene = "57"
	classAuth              = "28"
	stateSerialization     = "40001"
	stateDeadlock          = "40P01"
	stateLockNotAvailable  = "55P03"
	stateInvalidCatalog    = "3D000"
	stateInvalidSchema     = "3F000"
	stateUndefinedTable    = "42P01"
	stateUndefinedColumn   = "42703"
	stateInsufficientPriv  = "42501"
	stateProgramLimit      = "54000"
	stateInternalError     = "XX000"
	// citusCopyRoutine is the Citus function that re-raises a worker's COPY
	// error on the coordinator: with the worker's message and detail, but as
	// XX000 and without its SQLSTATE, constraint or line.
	citusCopyRoutine = "ReportCopyError"
)

// CitusForwarded reports whether err is a worker's COPY error that a Citus
// coordinator re-raised (ReportCopyError): the worker refused a row, and
// its SQLSTATE, constraint name and line are lost on the way.
func CitusForwarded(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == stateInternalError && pgErr.Routine == citusCopyRoutine
}

// Classify decides whether err is retryable, caused by data, needs an
// operator, or is permanent. Errors it does not recognize are retryable, so
// that nothing is dropped on a surprise; the Collector's retry bounds how long.
func Classify(err error) Class {
	switch {
	case consumererror.IsPermanent(err):
		return Permanent
	case errors.Is(err, entry.ErrMalformed):
		return Data
	case errors.Is(err, schema.ErrNewerSchema), errors.Is(err, schema.ErrForeignSchema), errors.Is(err, schema.ErrMissing),
		errors.Is(err, schema.ErrColumnType), errors.Is(err, schema.ErrNoCitus):
		return Config
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		var step *schema.StepError
		if errors.As(err, &step) && !retryableCode(code) {
			// A migration or DDL statement the server refuses: only an
			// operator can change that. The error names the statement.
			return Config
		}
		switch {
		case strings.HasPrefix(code, classDataException), strings.HasPrefix(code, classIntegrity),
			code == stateProgramLimit:
			return Data
		case CitusForwarded(err):
			// What a worker refused while the coordinator copied rows to it:
			// isolation finds the rows (see isolate.go). A worker's refusal
			// that is not about rows (a full disk) cannot be told apart here;
			// isolation bounds what it costs, and keeps the rows.
			return Data
		case strings.HasPrefix(code, classAuth), code == stateInvalidCatalog, code == stateInvalidSchema,
			code == stateUndefinedTable, code == stateUndefinedColumn, code == stateInsufficientPriv:
			return Config
		case retryableCode(code):
			return Retryable
		default:
			// An unexpected server error: retry, bounded by retry_on_failure.
			return Retryable
		}
	}
	return Retryable
}

// retryableCode: SQLSTATEs of a server that may accept the same statement
// later.
func retryableCode(code string) bool {
	return strings.HasPrefix(code, classConnection) || strings.HasPrefix(code, classResources) ||
		strings.HasPrefix(code, classOperatorIntervene) || code == stateSerialization ||
		code == stateDeadlock || code == stateLockNotAvailable
}

// Outcome is a write's outcome as its telemetry's outcome attribute says it:
// written, duplicate (the ledger has it), damaged (a stream entry), or the
// error's class.
func Outcome(err error) string {
	switch {
	case err == nil:
		return "written"
	case errors.Is(err, ErrAlreadyCommitted):
		return "duplicate"
	case errors.Is(err, entry.ErrMalformed):
		return "damaged"
	default:
		return Classify(err).String()
	}
}

// ConsumerError is a failed write as the Collector's exporterhelper must see
// it: data errors that come back after isolation (the rejects table refused
// the rows too) and permanent ones are consumererror.Permanent, so that the
// batch is dropped and counted; the rest stay retryable, Config errors too,
// since an operator can fix a privilege or a table while the queue holds
// the batch.
func ConsumerError(err error) error {
	switch Classify(err) {
	case Data:
		return consumererror.NewPermanent(err)
	default:
		return err
	}
}

// Hint is a sentence telling an operator how to fix a Config error.
func Hint(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	var step *schema.StepError
	if errors.As(err, &step) && Classify(err) == Config {
		// The caller says whether it retries: the start does not.
		return "the server refused a schema step, and would refuse it again: fix what it names (or apply it by hand as the schema owner)"
	}
	switch {
	case strings.HasPrefix(pgErr.Code, classAuth):
		return "check the user and password in endpoint (or the password key)"
	case pgErr.Code == stateInvalidCatalog:
		return "the database named in endpoint does not exist: create it or fix the URL"
	case pgErr.Code == stateInvalidSchema, pgErr.Code == stateUndefinedTable, pgErr.Code == stateUndefinedColumn:
		return "the schema or a table is missing: set create_schema: true or apply the DDL of internal/schema/sql (docs/schema.md)"
	case pgErr.Code == stateInsufficientPriv:
		return "the role lacks a privilege: grant it as docs/schema.md shows (a role that can only write)"
	}
	return ""
}
