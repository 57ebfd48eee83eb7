package kafkacompat

import (
	"testing"

	"github.com/pgmsg/pgmsg/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
