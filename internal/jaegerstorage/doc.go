// Package jaegerstorage serves Jaeger's Remote Storage API v2 over gRPC (the
// jaeger.storage.v2 TraceReader and DependencyReader services, OTLP out) from
// a traceread.Reader. The few messages of the API are encoded and decoded
// here with protowire, by their field numbers in jaeger-idl's
// proto/storage/v2, so that no generated code or Jaeger module is needed;
// traces go out as OTLP TracesData, which pdata encodes.
package jaegerstorage // import "github.com/postgrescopy/postgrescopy/internal/jaegerstorage"
