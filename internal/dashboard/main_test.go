package dashboard

import (
	"testing"

	"github.com/pgmsg/pgmsg/internal/pgtest"
	"github.com/pgmsg/pgmsg/pgmsgtest"
)

func TestMain(m *testing.M) { pgtest.Main(pgmsgtest.WithMain(m)) }
