package agentconform_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test ends with nothing of it left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
