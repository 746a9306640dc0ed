// Command soak puts the built collector through failures under OTLP load and
// checks that every item it acknowledged is in PostgreSQL exactly once. Each
// scenario (-scenarios) starts what it breaks on its own: kill SIGKILLs and
// restarts the collector in Redis mode; redis-empty and redis-aof SIGKILL a
// throwaway redis-server without and with persistence; pg-outage and
// collector-kill-outage stop a throwaway PostgreSQL cluster; identical sends
// the same request five times. `make soak` runs them all and prints one table;
// it exits 1 when a scenario fails and 2 when one could not run.
package main
