// Package rows turns pdata into rows of the postgrescopy tables, encoded
// directly in PostgreSQL's binary COPY format. Each table's columns and their
// kinds live in one Table value, and every row writer is checked against it.
// Rows are sanitized on the way (docs/sanitization.md) and kept within the
// batch's Limits, so that PostgreSQL has no reason to refuse them.
package rows
