// Command soak runs the built collector under sustained OTLP load with Redis
// coordination, kills it with SIGKILL at random moments and restarts it, then
// checks that every span the collector acknowledged is in PostgreSQL exactly
// once (and no span more than once). `make soak` runs it; it exits 1 on any
// loss or duplicate and 2 when the soak itself could not run.
package main
