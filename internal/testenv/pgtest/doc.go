// Package pgtest gives tests a real PostgreSQL: the server named by
// POSTGRESCOPY_TEST_URL (default: the local one on 127.0.0.1:5432), and a
// fresh schema per test that is dropped when the test ends.
package pgtest
