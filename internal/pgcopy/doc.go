// Package pgcopy encodes rows straight into PostgreSQL's binary COPY format,
// so that the hot path never builds []any rows or goes through reflection.
package pgcopy
