// Package jaegerremotestorageextension is the jaeger_remote_storage
// extension: it serves Jaeger's Remote Storage API v2 over gRPC from the
// tables the postgrescopy exporter writes, so that Jaeger (its
// jaeger_storage extension with a grpc backend), and Grafana through
// Jaeger, show the traces stored in PostgreSQL. It only reads: a read
// replica serves it as well as the primary.
package jaegerremotestorageextension // import "github.com/postgrescopy/postgrescopy/extension/jaegerremotestorageextension"
