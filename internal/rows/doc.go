// Package rows turns pdata into rows of the postgrescopy tables, encoded
// directly in PostgreSQL's binary COPY format. Each table's column list lives
// in one Table value, and every row writer is checked against its length.
package rows
