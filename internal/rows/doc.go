// Package rows turns pdata into rows of the postgrescopy tables, encoded
// directly in PostgreSQL's binary COPY format, one file per signal: the
// columns come from the batch's tables.Layout (built-in and promoted), the
// promoted attributes are converted and resolved here, rows are sanitized on
// the way (docs/sanitization.md) and kept within the batch's Limits (shrunk
// when over), so that PostgreSQL has no reason to refuse them. Refused rows
// are rendered back as JSON for the rejects table (render.go).
package rows
