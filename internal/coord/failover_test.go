package coord

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRecentAddsKeepsTheWindow: the entries remembered for the failover
// audit are those of the last failoverWindow, at most failoverTracked,
// oldest first; forgotten when the stream is lost whole; a stream this
// collector does not add to has none.
func TestRecentAddsKeepsTheWindow(t *testing.T) {
	var r recentAdds
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 10 {
		r.add(addedEntry{id: strconv.Itoa(i), key: "k" + strconv.Itoa(i), items: 1, at: t0.Add(time.Duration(i) * 10 * time.Second)})
	}
	got := r.snapshot()
	// The last one was added at 90s: 30s..90s are within the minute.
	require.Len(t, got, 7)
	assert.Equal(t, "3", got[0].id)
	assert.Equal(t, "9", got[6].id)

	var big recentAdds
	for i := range failoverTracked + 5 {
		big.add(addedEntry{id: strconv.Itoa(i), at: t0})
	}
	got = big.snapshot()
	require.Len(t, got, failoverTracked)
	assert.Equal(t, "5", got[0].id)
	assert.Equal(t, strconv.Itoa(failoverTracked+4), got[len(got)-1].id)
	assert.LessOrEqual(t, len(big.list), 2*failoverTracked+1, "the list is compacted")

	big.forget(t0)
	assert.Empty(t, big.snapshot())
	big.add(addedEntry{id: "after", at: t0})
	assert.Len(t, big.snapshot(), 1)

	var none *recentAdds
	assert.Empty(t, none.snapshot())
	none.forget(t0)
}
