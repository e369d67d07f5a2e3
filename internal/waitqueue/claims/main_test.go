package claims_test

import (
	"os"
	"testing"

	"usher/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Stop()
	os.Exit(code)
}

const epoch = testenv.Epoch
