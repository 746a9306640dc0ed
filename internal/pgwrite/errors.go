package pgwrite

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Class says what to do about an error.
type Class int

const (
	// Retryable errors may succeed later: the server is unreachable,
	// restarting, out of connections, or a lock or serialization conflict.
	Retryable Class = iota
	// Data errors are caused by the rows themselves; retrying the same rows
	// cannot succeed.
	Data
	// Config errors need an operator: wrong credentials, missing database,
	// missing table or permission.
	Config
)

func (c Class) String() string {
	switch c {
	case Retryable:
		return "retryable"
	case Data:
		return "data"
	default:
		return "config"
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
	stateQueryCanceled     = "57014"
	stateInvalidCatalog    = "3D000"
	stateInvalidSchema     = "3F000"
	stateUndefinedTable    = "42P01"
	stateUndefinedColumn   = "42703"
	stateInsufficientPriv  = "42501"
	stateProgramLimit      = "54000"
)

// Classify decides whether err is retryable, caused by data, or needs an
// operator. Errors it does not recognize are retryable, so that nothing is
// dropped on a surprise; the Collector's retry bounds how long.
func Classify(err error) Class {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		code := pgErr.Code
		switch {
		case strings.HasPrefix(code, classDataException), strings.HasPrefix(code, classIntegrity),
			code == stateProgramLimit:
			return Data
		case strings.HasPrefix(code, classAuth), code == stateInvalidCatalog, code == stateInvalidSchema,
			code == stateUndefinedTable, code == stateUndefinedColumn, code == stateInsufficientPriv:
			return Config
		case strings.HasPrefix(code, classConnection), strings.HasPrefix(code, classResources),
			strings.HasPrefix(code, classOperatorIntervene), code == stateSerialization,
			code == stateDeadlock, code == stateLockNotAvailable:
			return Retryable
		default:
			// An unexpected server error: retry, bounded by retry_on_failure.
			return Retryable
		}
	}
	return Retryable
}

// Hint is a sentence telling an operator how to fix a Config error.
func Hint(err error) string {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return ""
	}
	switch {
	case strings.HasPrefix(pgErr.Code, classAuth):
		return "check the user and password in endpoint (or the password key)"
	case pgErr.Code == stateInvalidCatalog:
		return "the database named in endpoint does not exist: create it or fix the URL"
	case pgErr.Code == stateInvalidSchema, pgErr.Code == stateUndefinedTable, pgErr.Code == stateUndefinedColumn:
		return "the schema or a table is missing: set create_schema: true or apply the DDL from the README"
	case pgErr.Code == stateInsufficientPriv:
		return "the role lacks a privilege: grant it as shown in the README's least-privilege section"
	}
	return ""
}

// IsUnreachable reports whether err means the server could not be reached or
// dropped the connection (as opposed to answering with an error).
func IsUnreachable(err error) bool {
	var netErr net.Error
	var connErr *pgconn.ConnectError
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return strings.HasPrefix(pgErr.Code, classConnection) || strings.HasPrefix(pgErr.Code, classOperatorIntervene) && pgErr.Code != stateQueryCanceled ||
			strings.HasPrefix(pgErr.Code, classResources)
	}
	return errors.As(err, &connErr) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}
