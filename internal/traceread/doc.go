// Package traceread reads spans back out of the exporter's tables as pdata:
// a trace by id, the traces and trace ids a search finds, the services and
// operations, and the dependencies between services. The spans come back as
// they went in (long attributes merged, resource, scope, events and links),
// under the documented stand-ins of the tables. It is the storage behind the
// Jaeger remote storage extension; it holds no gRPC.
package traceread // import "github.com/postgrescopy/postgrescopy/internal/traceread"
