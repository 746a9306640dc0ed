package main

import (
	"os"
	"slices"
	"strconv"
	"testing"
)

// TestProcessTree: the split layout finds the own server's processes by
// their parent and the CPUs it may pin to from /proc.
func TestProcessTree(t *testing.T) {
	if got := parentPID(strconv.Itoa(os.Getpid())); got != strconv.Itoa(os.Getppid()) {
		t.Errorf("parentPID(self) = %q, want %d", got, os.Getppid())
	}
	if parentPID("999999999") != "" {
		t.Error("parentPID of no process is not empty")
	}
	cpus := allowedCPUs()
	if len(cpus) == 0 || !slices.IsSorted(cpus) {
		t.Errorf("allowedCPUs = %v", cpus)
	}
	if isClientBackend(strconv.Itoa(os.Getpid())) {
		t.Error("the test binary is not a PostgreSQL client backend")
	}
}
