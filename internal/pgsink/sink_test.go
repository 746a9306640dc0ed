package pgsink

import (
	"context"
	"crypto/tls"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/postgrescopy/postgrescopy/internal/schema"
	"github.com/postgrescopy/postgrescopy/internal/tables"
)

type nopRecorder struct{}

func (nopRecorder) Wrote(context.Context, string, time.Duration) {}
func (nopRecorder) Rows(context.Context, string, string, int)    {}
func (nopRecorder) Bytes(context.Context, string, int)           {}
func (nopRecorder) Rejected(context.Context, string, int)        {}
func (nopRecorder) Lost(context.Context, string, int)            {}

func parse(t *testing.T, dsn string) *pgxpool.Config {
	t.Helper()
	pc, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	return pc
}

// TestNewAppliesTLSAndCitus: the tls section is the only way in (no
// fallbacks, the host as server name), Citus copies in sequential mode unless
// the endpoint says otherwise, and the target never shows the password.
func TestNewAppliesTLSAndCitus(t *testing.T) {
	pc := parse(t, "postgres://writer:s3cret@db.example:6543/telemetry?sslmode=prefer")
	require.NotEmpty(t, pc.ConnConfig.Fallbacks, "sslmode=prefer has a plaintext fallback")
	s := New(Config{Pool: pc, TLS: &tls.Config{MinVersion: tls.VersionTLS12}, Citus: true, Layout: tables.DefaultLayout()}, zap.NewNop(), nopRecorder{})
	assert.Equal(t, "writer@db.example:6543/telemetry", s.Target())
	assert.NotContains(t, s.Target(), "s3cret")
	cc := s.cfg.Pool.ConnConfig
	assert.Nil(t, cc.Fallbacks)
	require.NotNil(t, cc.TLSConfig)
	assert.Equal(t, "db.example", cc.TLSConfig.ServerName)
	assert.Equal(t, "sequential", cc.RuntimeParams[schema.CitusModifyMode])

	pc = parse(t, "postgres://writer@db.example/telemetry?"+schema.CitusModifyMode+"=parallel")
	s = New(Config{Pool: pc, Citus: true, Layout: tables.DefaultLayout()}, zap.NewNop(), nopRecorder{})
	assert.Equal(t, "parallel", s.cfg.Pool.ConnConfig.RuntimeParams[schema.CitusModifyMode], "the endpoint's own setting is kept")
}

// TestNotReadyBeforeStart: a write before the schema is ready is refused
// with the reason, and counts nothing in flight.
func TestNotReadyBeforeStart(t *testing.T) {
	s := New(Config{Pool: parse(t, "postgres://writer@db.example/telemetry"), Layout: tables.DefaultLayout()}, zap.NewNop(), nopRecorder{})
	assert.False(t, s.Ready())
	err := s.WriteBatch(context.Background(), nil, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "waiting for PostgreSQL at writer@db.example:5432/telemetry: not started")
	s.setWaiting(errors.New("connection refused"))
	assert.ErrorContains(t, s.WriteEntries(context.Background(), nil, nil), "connection refused")
	assert.Zero(t, s.InFlight())
	s.Stop()
	s.Wait()
	s.Close()
}
