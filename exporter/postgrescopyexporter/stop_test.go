package postgrescopyexporter

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type ctxKey struct{}

// A merged batch's context is done once both callers gave up, not before,
// keeps the first caller's values, and is never done when a caller cannot
// give up.
func TestMergeCallers(t *testing.T) {
	c1, cancel1 := context.WithCancel(context.WithValue(context.Background(), ctxKey{}, "first"))
	c2, cancel2 := context.WithCancel(context.Background())
	m := mergeCallers(c1, c2)
	assert.Equal(t, "first", m.Value(ctxKey{}))
	cancel1()
	select {
	case <-m.Done():
		t.Fatal("done while a caller still waits")
	case <-time.After(20 * time.Millisecond):
	}
	cancel2()
	select {
	case <-m.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not done after every caller gave up")
	}

	c3, cancel3 := context.WithCancel(context.Background())
	defer cancel3()
	forever := mergeCallers(c3, context.Background())
	require.Nil(t, forever.Done(), "a caller that cannot give up keeps the batch going")

	// A chain of merges, as a batch grows request by request.
	var cancels []context.CancelFunc
	chain := context.Context(nil)
	for range 5 {
		c, cancel := context.WithCancel(context.Background())
		cancels = append(cancels, cancel)
		if chain == nil {
			chain = c
		} else {
			chain = mergeCallers(chain, c)
		}
	}
	for _, cancel := range cancels[:4] {
		cancel()
	}
	assert.NoError(t, chain.Err(), "one caller still waits")
	cancels[4]()
	require.Eventually(t, func() bool { return chain.Err() != nil }, 5*time.Second, time.Millisecond)
}
