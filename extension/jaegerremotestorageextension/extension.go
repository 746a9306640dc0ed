package jaegerremotestorageextension

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configgrpc"
	"go.opentelemetry.io/collector/extension"
	"go.uber.org/zap"
	"google.golang.org/grpc"

	"github.com/postgrescopy/postgrescopy/internal/jaegerstorage"
	"github.com/postgrescopy/postgrescopy/internal/traceread"
)

// storage is the running extension: a pool and the gRPC server over it.
type storage struct {
	cfg *Config
	set extension.Settings

	pool   *pgxpool.Pool
	server *grpc.Server
	wg     sync.WaitGroup
}

var _ extension.Extension = (*storage)(nil)

func newStorage(cfg *Config, set extension.Settings) *storage {
	return &storage{cfg: cfg, set: set}
}

// Start opens the pool (connections are made on demand: a database not
// reachable yet fails the requests, not the start) and serves gRPC.
func (s *storage) Start(ctx context.Context, host component.Host) error {
	pc, err := s.cfg.poolConfig(ctx)
	if err != nil {
		return err
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		return fmt.Errorf("open the PostgreSQL pool: %w", err)
	}
	l := s.cfg.Limits
	reader := traceread.New(pool, s.cfg.Schema, traceread.Limits{
		MaxTraces: l.MaxTraces, DefaultTraces: l.DefaultTraces, MaxTraceIDs: l.MaxTraceIDs, MaxSpansPerTrace: l.MaxSpansPerTrace,
	})
	server, err := s.cfg.GRPC.ToServer(ctx, host.GetExtensions(), s.set.TelemetrySettings,
		configgrpc.WithGrpcServerOption(jaegerstorage.ServerOption()))
	if err != nil {
		pool.Close()
		return fmt.Errorf(`"grpc": %w`, err)
	}
	jaegerstorage.NewServer(reader, s.cfg.Timeout).Register(server)
	lis, err := s.cfg.GRPC.NetAddr.Listen(ctx)
	if err != nil {
		pool.Close()
		return fmt.Errorf("listen on %s: %w", s.cfg.GRPC.NetAddr.Endpoint, err)
	}
	s.pool, s.server = pool, server
	s.set.Logger.Info("Serving the Jaeger remote storage API", zap.String("endpoint", lis.Addr().String()), zap.String("schema", s.cfg.Schema))
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := server.Serve(lis); err != nil && !errors.Is(err, grpc.ErrServerStopped) && !errors.Is(err, net.ErrClosed) {
			s.set.Logger.Error("The Jaeger remote storage server stopped", zap.Error(err))
		}
	}()
	return nil
}

// Shutdown lets the requests in flight finish until ctx is done, then
// closes the connections. It is safe without Start and safe twice.
func (s *storage) Shutdown(ctx context.Context) error {
	if s.server != nil {
		stopped := make(chan struct{})
		go func() {
			s.server.GracefulStop()
			close(stopped)
		}()
		select {
		case <-stopped:
		case <-ctx.Done():
			s.server.Stop()
			<-stopped
		}
		s.wg.Wait()
		s.server = nil
	}
	if s.pool != nil {
		s.pool.Close()
		s.pool = nil
	}
	return nil
}
