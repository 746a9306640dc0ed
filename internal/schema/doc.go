// Package schema holds postgrescopy's DDL as embedded SQL files and applies
// it: the versioned migrations (sql/, one numbered file each, recorded in
// schema_version) in order, once, under an advisory lock so that many
// collectors starting together migrate exactly once; partition maintenance;
// the index set; the promoted columns of a tables.Layout; Citus distribution;
// the writer grants; and the create_schema: false check.
package schema
