package jaegerstorage_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every server, connection and pool a test starts must be gone when it ends.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
