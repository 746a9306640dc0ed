package postgrescopyexporter

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/postgrescopy/postgrescopy/exporter/postgrescopyexporter/internal/metadata"
	"github.com/postgrescopy/postgrescopy/internal/request"
	"github.com/postgrescopy/postgrescopy/internal/testenv/pgtest"
)

// memStorage is a storage extension kept in memory across two exporters,
// standing for file_storage across a collector restart.
type memStorage struct {
	component.StartFunc
	component.ShutdownFunc
	mu sync.Mutex
	kv map[string][]byte
}

func (s *memStorage) GetClient(context.Context, component.Kind, component.ID, string) (storage.Client, error) {
	return s, nil
}

func (s *memStorage) Get(_ context.Context, key string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv[key], nil
}

func (s *memStorage) Set(_ context.Context, key string, value []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.kv[key] = append([]byte(nil), value...)
	return nil
}

func (s *memStorage) Delete(_ context.Context, key string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.kv, key)
	return nil
}

func (s *memStorage) Batch(ctx context.Context, ops ...*storage.Operation) error {
	for _, op := range ops {
		switch op.Type {
		case storage.Get:
			op.Value, _ = s.Get(ctx, op.Key)
		case storage.Set:
			_ = s.Set(ctx, op.Key, op.Value)
		case storage.Delete:
			_ = s.Delete(ctx, op.Key)
		}
	}
	return nil
}

func (s *memStorage) Close(context.Context) error { return nil }

type storageHost struct {
	ext map[component.ID]component.Component
}

func (h storageHost) GetExtensions() map[component.ID]component.Component { return h.ext }

// TestPersistentQueueKeepsRequestsDistinct: requests queued while PostgreSQL
// is away survive a restart through the storage (with their keys) and are
// written once each, identical ones included.
func TestPersistentQueueKeepsRequestsDistinct(t *testing.T) {
	cfg, schemaName := testConfig(t)
	storageID := component.MustNewID("memstorage")
	host := storageHost{ext: map[component.ID]component.Component{storageID: &memStorage{kv: map[string][]byte{}}}}
	q := metadata.NewDefaultSendingQueueConfig()
	q.Get().StorageID = &storageID
	// Acknowledged once the storage holds it, so that Consume returns while
	// PostgreSQL is away.
	q.Get().WaitForResult = false
	cfg.QueueConfig = q
	cfg.RetryConfig.Enabled = true
	cfg.RetryConfig.InitialInterval = 10 * time.Millisecond
	ctx := context.Background()

	away := *cfg
	away.Endpoint = "postgres://postgres@127.0.0.1:1/postgres?connect_timeout=1"
	le, err := NewFactory().CreateLogs(ctx, exportertest.NewNopSettings(metadata.Type), &away)
	require.NoError(t, err)
	require.NoError(t, le.Start(ctx, host))
	for range 5 {
		require.NoError(t, le.ConsumeLogs(ctx, heartbeat()))
	}
	require.NoError(t, le.Shutdown(ctx))

	// The stored requests carry their keys.
	var keys []string
	st := host.ext[storageID].(*memStorage)
	enc := request.NewEncoding(request.Logs)
	for _, v := range st.kv {
		if _, r, err := enc.Unmarshal(v); err == nil {
			keys = append(keys, r.(*request.Request[plog.Logs]).Keys()...)
		}
	}
	require.Len(t, keys, 5)

	le, err = NewFactory().CreateLogs(ctx, exportertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	require.NoError(t, le.Start(ctx, host))
	pool := pgtest.Pool(t)
	require.Eventually(t, func() bool { return pgtest.Count(t, pool, schemaName, "ledger") == 5 }, 10*time.Second, 20*time.Millisecond)
	require.NoError(t, le.Shutdown(ctx))
	require.EqualValues(t, 5, pgtest.Count(t, pool, schemaName, "logs"))
	var written []string
	require.NoError(t, pool.QueryRow(ctx, "SELECT array_agg(entry_id) FROM "+schemaName+".ledger").Scan(&written))
	require.ElementsMatch(t, keys, written, "the ledger holds the keys given at Consume, before the restart")
}
