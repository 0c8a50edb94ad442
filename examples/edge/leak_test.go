package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The admin commands (ca, lease-key, check) leave nothing running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
