// Package jsonb encodes OpenTelemetry attribute maps and values as JSON text
// that PostgreSQL's jsonb accepts, by hand and without reflection: numbers stay
// numbers, booleans stay booleans, and what JSON or jsonb cannot hold (NUL,
// invalid UTF-8, NaN, infinities, bytes) gets a documented stand-in. It also
// bounds strings and cuts whole documents to a size, keeping them valid.
package jsonb
