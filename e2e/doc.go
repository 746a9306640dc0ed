// Package e2e tests the built otelcol-postgrescopy distribution end to end:
// the binary from `make build` runs as a child process, telemetrygen and a
// plain OTLP gRPC client feed it, and the rows that reach PostgreSQL are
// counted. The package holds only tests. They need the collector binary
// (POSTGRESCOPY_COLLECTOR, `make build`), telemetrygen
// (POSTGRESCOPY_TELEMETRYGEN, `make tools`) and the PostgreSQL named by
// POSTGRESCOPY_TEST_URL (`make services`); a missing one fails the test
// rather than skipping it, so that `make test` cannot pass without them
// (under -short, `make unit`, such a test skips with the reason).
package e2e
