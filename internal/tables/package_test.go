package tables_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every pool, client and goroutine a test starts must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
