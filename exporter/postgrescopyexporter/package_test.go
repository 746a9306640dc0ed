package postgrescopyexporter

import (
	"testing"

	"go.uber.org/goleak"
)

// Every pool, Redis client and background loop must be gone after Shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
