// Package pgwrite writes a rows.Batch to PostgreSQL: one transaction, one
// binary COPY per table, and the classification of what can go wrong into
// data errors, transient errors and misconfiguration.
package pgwrite
