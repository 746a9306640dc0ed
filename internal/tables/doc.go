// Package tables describes the destination tables: each table's columns and
// their kinds, built-in and promoted, and the Layout that one exporter
// writes, with its descriptor (how a stream entry says which columns its rows
// have). It holds no pdata: the row writers (internal/rows), the entry format
// (internal/entry), the writer (internal/pgwrite) and the schema checks
// (internal/schema) read the columns from the same Layout, so that they
// cannot drift.
package tables // import "github.com/postgrescopy/postgrescopy/internal/tables"
