// Package pgbouncer starts a throwaway PgBouncer in front of a PostgreSQL
// server, for the tests and the bench that check postgrescopy through a
// connection pooler (installing the Debian package when missing and root).
package pgbouncer
