// Package pglocal holds what the tests and the bench need to run throwaway
// local PostgreSQL servers and poolers: finding the server binaries, handing
// files to the postgres OS user (initdb, postgres and pgbouncer refuse to run
// as root).
package pglocal
