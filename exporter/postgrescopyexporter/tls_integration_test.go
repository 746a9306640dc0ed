package postgrescopyexporter

import (
	"context"
	"crypto/x509"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/config/configopaque"
	"go.opentelemetry.io/collector/config/configoptional"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/exporter"
	"go.opentelemetry.io/collector/exporter/exporterhelper"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// TestTLS shares one TLS-only server (hostssl + scram-sha-256) between its
// subtests, because initdb dominates the cost of each.
func TestTLS(t *testing.T) {
	srv := pgtest.StartTLSServer(t)
	pool := srv.Pool(t)

	// The reading pool itself must be on TLS, or "read back over TLS" is
	// not what this test checks.
	var ssl bool
	require.NoError(t, pool.QueryRow(context.Background(),
		"SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl))
	require.True(t, ssl, "the reading connection is not TLS")

	t.Run("VerifyFullURLWithPasswordKey", func(t *testing.T) {
		endpoint := srv.URL("verify-full")
		require.NotContains(t, endpoint, srv.Password, "the password must come only from the password key")
		cfg := tlsTestConfig(t, pool, endpoint)
		cfg.Password = configopaque.String(srv.Password)
		writeAndCount(t, pool, cfg, 123)
	})

	t.Run("TLSSectionWithCAFile", func(t *testing.T) {
		// No sslmode in the URL: the tls section alone decides.
		cfg := tlsTestConfig(t, pool, srv.URL(""))
		cfg.Password = configopaque.String(srv.Password)
		cfg.TLS = configoptional.Some(configtls.ClientConfig{Config: configtls.Config{CAFile: srv.CAFile}})
		writeAndCount(t, pool, cfg, 77)
	})

	t.Run("TLSSectionServerNameOverride", func(t *testing.T) {
		// The certificate's DNS name, while connecting by IP address.
		cfg := tlsTestConfig(t, pool, srv.URL(""))
		cfg.Password = configopaque.String(srv.Password)
		cfg.TLS = configoptional.Some(configtls.ClientConfig{
			Config:     configtls.Config{CAFile: srv.CAFile},
			ServerName: "localhost",
		})
		writeAndCount(t, pool, cfg, 5)
	})

	t.Run("PlaintextRefused", func(t *testing.T) {
		cfg := tlsTestConfig(t, pool, srv.URL("disable"))
		cfg.Password = configopaque.String(srv.Password)
		err := startAndPush(t, cfg, exportertest.NewNopSettings(metadata.Type))
		require.Error(t, err, "a plaintext connection must be refused")
		// The server's own refusal, not some client-side failure.
		require.ErrorContains(t, err, "no pg_hba.conf entry")
		require.ErrorContains(t, err, "no encryption")
	})

	t.Run("VerifyFullWrongHostFails", func(t *testing.T) {
		// OtherHost reaches the same server, whose certificate does not name it.
		cfg := tlsTestConfig(t, pool, srv.URLFor(srv.OtherHost, "verify-full"))
		cfg.Password = configopaque.String(srv.Password)
		err := startAndPush(t, cfg, exportertest.NewNopSettings(metadata.Type))
		var hostErr x509.HostnameError
		require.ErrorAs(t, err, &hostErr, "want a certificate name mismatch, got %v", err)
	})

	t.Run("TLSSectionWrongServerNameFails", func(t *testing.T) {
		cfg := tlsTestConfig(t, pool, srv.URL(""))
		cfg.Password = configopaque.String(srv.Password)
		cfg.TLS = configoptional.Some(configtls.ClientConfig{
			Config:     configtls.Config{CAFile: srv.CAFile},
			ServerName: "db.example.invalid",
		})
		err := startAndPush(t, cfg, exportertest.NewNopSettings(metadata.Type))
		var hostErr x509.HostnameError
		require.ErrorAs(t, err, &hostErr, "want a certificate name mismatch, got %v", err)
	})

	t.Run("PasswordNeverLogged", func(t *testing.T) {
		const wrong = "wrongPw-7f3a9c1e5b"
		core, logs := observer.New(zapcore.DebugLevel)
		set := exportertest.NewNopSettings(metadata.Type)
		set.Logger = zap.New(core)
		secrets := []string{srv.Password, wrong}

		// Success: writes, and logs at Debug and Info.
		cfg := tlsTestConfig(t, pool, srv.URL("verify-full"))
		cfg.Password = configopaque.String(srv.Password)
		require.NoError(t, startAndPush(t, cfg, set))

		// Wrong password inside the URL: Start fails.
		u, err := url.Parse(srv.URL("verify-full"))
		require.NoError(t, err)
		u.User = url.UserPassword(srv.User, wrong)
		cfg = tlsTestConfig(t, pool, u.String())
		err = startAndPush(t, cfg, set)
		require.Error(t, err)
		require.ErrorContains(t, err, "password authentication failed")
		assertNoSecret(t, err.Error(), secrets)

		// Wrong password through the password key, the right one in the URL.
		u.User = url.UserPassword(srv.User, srv.Password)
		cfg = tlsTestConfig(t, pool, u.String())
		cfg.Password = configopaque.String(wrong)
		err = startAndPush(t, cfg, set)
		require.ErrorContains(t, err, "password authentication failed")
		assertNoSecret(t, err.Error(), secrets)

		// A TLS failure with the right password: Start succeeds, the waiting
		// client logs the connection error and the push returns it.
		cfg = tlsTestConfig(t, pool, srv.URLFor(srv.OtherHost, "verify-full"))
		cfg.Password = configopaque.String(srv.Password)
		err = startAndPush(t, cfg, set)
		require.Error(t, err)
		assertNoSecret(t, err.Error(), secrets)

		// Otherwise the absence check below would pass on an empty log.
		require.NotEmpty(t, logs.FilterMessage("batch written").All(), "the debug log of the write is missing")
		target := fmt.Sprintf("%s@%s:%d/postgres", srv.User, srv.OtherHost, srv.Port)
		require.NotEmpty(t, logs.FilterField(zap.String("target", target)).All(),
			"the warning about the unreachable server is missing")
		for _, e := range logs.All() {
			assertNoSecret(t, renderEntry(e), secrets)
		}
	})
}

// tlsTestConfig is a direct-write config (no queue, no retry, so pushes are
// synchronous) into a fresh schema of the TLS server.
func tlsTestConfig(t *testing.T, pool *pgxpool.Pool, endpoint string) *Config {
	cfg := defaultConfig()
	cfg.Endpoint = configopaque.String(endpoint)
	cfg.Schema = pgtest.Schema(t, pool)
	cfg.QueueConfig = configoptional.None[exporterhelper.QueueBatchConfig]()
	cfg.RetryConfig.Enabled = false
	return cfg
}

// writeAndCount writes n spans, checks that the exporter's connections are
// TLS while it runs, and reads the rows back.
func writeAndCount(t *testing.T, pool *pgxpool.Pool, cfg *Config, n int) {
	ctx := context.Background()
	te, err := NewFactory().CreateTraces(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, te.Start(ctx, componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, te.Shutdown(ctx)) })
	require.NoError(t, te.ConsumeTraces(ctx, makeTraces(n, "tls")))

	var conns int
	var allSSL bool
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*), coalesce(bool_and(s.ssl), false)
		FROM pg_stat_activity a JOIN pg_stat_ssl s USING (pid)
		WHERE a.application_name = 'postgrescopy'`).Scan(&conns, &allSSL))
	require.Positive(t, conns, "no exporter connection found")
	require.True(t, allSSL, "an exporter connection is not TLS")

	require.EqualValues(t, n, pgtest.Count(t, pool, cfg.Schema, "spans"))
}

// startAndPush starts a traces exporter, pushes one span and shuts it down;
// it returns Start's error, else the push's.
func startAndPush(t *testing.T, cfg *Config, set exporter.Settings) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	te, err := NewFactory().CreateTraces(ctx, set, cfg)
	require.NoError(t, err)
	if err := te.Start(ctx, componenttest.NewNopHost()); err != nil {
		require.NoError(t, te.Shutdown(ctx))
		return err
	}
	pushErr := te.ConsumeTraces(ctx, makeTraces(1, "tls"))
	require.NoError(t, te.Shutdown(ctx))
	return pushErr
}

// renderEntry is everything a log sink could print for e.
func renderEntry(e observer.LoggedEntry) string {
	return fmt.Sprintf("%s %s %v %s", e.LoggerName, e.Message, e.ContextMap(), e.Stack)
}

func assertNoSecret(t *testing.T, s string, secrets []string) {
	t.Helper()
	for _, secret := range secrets {
		if strings.Contains(s, secret) {
			t.Errorf("a password appears in %q", s)
		}
	}
}
