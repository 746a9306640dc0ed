package jaegerstorage

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/collector/pdata/ptrace"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"

	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// codec encodes and decodes the API's messages (see message). It replaces
// gRPC's proto codec on the server it is given to, under the same name, so
// that clients sending application/grpc+proto are served.
type codec struct{}

// ServerOption makes a gRPC server use the API's codec; a server serving the
// API with Register needs it.
func ServerOption() grpc.ServerOption { return grpc.ForceServerCodecV2(codec{}) }

func (codec) Name() string { return "proto" }

func (codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(message)
	if !ok {
		return nil, fmt.Errorf("jaegerstorage: cannot encode %T", v)
	}
	b, err := m.marshal()
	if err != nil {
		return nil, err
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(message)
	if !ok {
		return fmt.Errorf("jaegerstorage: cannot decode into %T", v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.unmarshal(buf.ReadOnlyData())
}

var _ encoding.CodecV2 = codec{}

// Server serves the API from a Reader.
type Server struct {
	reader  *traceread.Reader
	timeout time.Duration
}

// NewServer returns a Server reading through r; each request gets timeout
// at most (0: only the client's deadline).
func NewServer(r *traceread.Reader, timeout time.Duration) *Server {
	return &Server{reader: r, timeout: timeout}
}

// bound applies the server's timeout to a request's context.
func (s *Server) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, s.timeout)
}

// Register adds the TraceReader and DependencyReader services to gs, which
// must have been made with ServerOption.
func (s *Server) Register(gs *grpc.Server) {
	gs.RegisterService(&traceReaderDesc, s)
	gs.RegisterService(&dependencyReaderDesc, s)
}

// traceReaderServer and dependencyReaderServer are the handler types the
// service descriptors name (gRPC checks that the server implements them).
type traceReaderServer interface{ traceReader() }
type dependencyReaderServer interface{ dependencyReader() }

func (*Server) traceReader()      {}
func (*Server) dependencyReader() {}

// grpcError maps a read error to a gRPC status: a request over a limit is
// the client's to fix, a cancelled or expired context says so, the rest is
// internal (the message names what failed, never a credential).
func grpcError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, traceread.ErrTooManyTraceIDs), errors.Is(err, errUnsupportedValue):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func unary[Req any, PReq interface {
	*Req
	message
}](fullMethod string, call func(s *Server, ctx context.Context, req PReq) (message, error)) grpc.MethodHandler {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		req := PReq(new(Req))
		if err := dec(req); err != nil {
			return nil, status.Error(codes.InvalidArgument, err.Error())
		}
		s := srv.(*Server)
		run := func(ctx context.Context, r any) (any, error) {
			ctx, cancel := s.bound(ctx)
			defer cancel()
			return call(s, ctx, r.(PReq))
		}
		if interceptor == nil {
			return run(ctx, req)
		}
		return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}, run)
	}
}

func streaming[Req any, PReq interface {
	*Req
	message
}](call func(s *Server, ctx context.Context, req PReq, emit func(ptrace.Traces) error) error) grpc.StreamHandler {
	return func(srv any, stream grpc.ServerStream) error {
		req := PReq(new(Req))
		if err := stream.RecvMsg(req); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		s := srv.(*Server)
		ctx, cancel := s.bound(stream.Context())
		defer cancel()
		return call(s, ctx, req, func(td ptrace.Traces) error {
			return stream.SendMsg(&tracesData{td: td})
		})
	}
}

var traceReaderDesc = grpc.ServiceDesc{
	ServiceName: "jaeger.storage.v2.TraceReader",
	HandlerType: (*traceReaderServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "GetServices", Handler: unary("/jaeger.storage.v2.TraceReader/GetServices", func(s *Server, ctx context.Context, _ *emptyRequest) (message, error) {
			services, err := s.reader.Services(ctx)
			return &getServicesResponse{services: services}, grpcError(err)
		})},
		{MethodName: "GetOperations", Handler: unary("/jaeger.storage.v2.TraceReader/GetOperations", func(s *Server, ctx context.Context, req *getOperationsRequest) (message, error) {
			ops, err := s.reader.Operations(ctx, req.service, req.spanKind)
			return &getOperationsResponse{ops: ops}, grpcError(err)
		})},
		{MethodName: "FindTraceIDs", Handler: unary("/jaeger.storage.v2.TraceReader/FindTraceIDs", func(s *Server, ctx context.Context, req *findTracesRequest) (message, error) {
			if req.invalid != nil {
				return nil, status.Error(codes.InvalidArgument, req.invalid.Error())
			}
			found, err := s.reader.FindTraceIDs(ctx, req.query)
			return &findTraceIDsResponse{found: found}, grpcError(err)
		})},
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "GetTraces", ServerStreams: true, Handler: streaming(func(s *Server, ctx context.Context, req *getTracesRequest, emit func(ptrace.Traces) error) error {
			return grpcError(s.reader.GetTraces(ctx, req.refs, emit))
		})},
		{StreamName: "FindTraces", ServerStreams: true, Handler: streaming(func(s *Server, ctx context.Context, req *findTracesRequest, emit func(ptrace.Traces) error) error {
			if req.invalid != nil {
				return status.Error(codes.InvalidArgument, req.invalid.Error())
			}
			return grpcError(s.reader.FindTraces(ctx, req.query, emit))
		})},
	},
	Metadata: "storage/v2/trace_storage.proto",
}

var dependencyReaderDesc = grpc.ServiceDesc{
	ServiceName: "jaeger.storage.v2.DependencyReader",
	HandlerType: (*dependencyReaderServer)(nil),
	Methods: []grpc.MethodDesc{
		{MethodName: "GetDependencies", Handler: unary("/jaeger.storage.v2.DependencyReader/GetDependencies", func(s *Server, ctx context.Context, req *getDependenciesRequest) (message, error) {
			if req.end.IsZero() {
				req.end = time.Now()
			}
			deps, err := s.reader.Dependencies(ctx, req.start, req.end)
			return &getDependenciesResponse{deps: deps}, grpcError(err)
		})},
	},
	Metadata: "storage/v2/dependency_storage.proto",
}
