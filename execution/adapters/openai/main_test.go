package openai_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every run, tunnel and health check ends with nothing of it left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
