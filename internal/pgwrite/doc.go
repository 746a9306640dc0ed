// Package pgwrite writes a rows.Batch to PostgreSQL: one transaction, one
// binary COPY per table; when PostgreSQL refuses rows on data, their isolation
// into the rejects table while the rest commits; and the classification of
// what can go wrong into data errors, transient errors and misconfiguration.
package pgwrite
