package loadgenreceiver

import (
	"testing"

	"go.uber.org/goleak"
)

// Generation runs on goroutines; none may outlive Shutdown.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
