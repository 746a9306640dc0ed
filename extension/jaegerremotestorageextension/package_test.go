package jaegerremotestorageextension

import (
	"testing"

	"go.uber.org/goleak"
)

// Every server, pool and goroutine a test starts must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
