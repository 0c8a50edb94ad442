package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The daemon's run ends with nothing of it left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
