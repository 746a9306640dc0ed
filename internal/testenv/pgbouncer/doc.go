// Package pgbouncer starts a throwaway PgBouncer in front of a PostgreSQL
// server, for the tests and the bench that check postgrescopy through a
// connection pooler. It installs nothing: scripts/deps.sh does.
package pgbouncer
