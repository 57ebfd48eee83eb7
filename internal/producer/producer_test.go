package producer

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgmsg/pgmsg/internal/errs"
)

// The Producer retries a failed batch only when nothing of it can have
// been written: the server answered with an error, or it was never sent.
func TestNothingWritten(t *testing.T) {
	if !nothingWritten(errs.Map(&pgconn.PgError{Code: "55P03"})) {
		t.Error("a server error rolled its transaction back")
	}
	if nothingWritten(errors.New("write: broken pipe")) {
		t.Error("an error of unknown outcome counted as nothing written")
	}
}
