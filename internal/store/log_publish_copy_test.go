package store

import (
	"strings"
	"testing"
	"time"
)

// PublishCopy sizes its buffer once, from copySize and copyMessagesBytes:
// the messages encodeCopy writes must fit in that bound, or every publish
// grows the buffer (copying the batch again) as it did before the bound.
func TestEncodeCopyFitsItsBound(t *testing.T) {
	long := strings.Repeat("s", 63) // the longest schema name PostgreSQL keeps
	for _, tc := range []struct {
		name                 string
		n, size              int
		keys, headers, stamp bool
	}{
		{"one record", 1, 1, false, false, false},
		{"values", 16, 1, false, false, false},
		{"empty values", 1000, 0, false, false, false},
		{"1 KiB values", 1000, 1024, false, false, false},
		{"everything set", 100, 10, true, true, true},
	} {
		b := NewPublishBatch("t", 3, tc.n)
		for i := range b.Values {
			b.Values[i] = make([]byte, tc.size)
			if tc.keys {
				b.SetKey(i, []byte("k"))
			}
			if tc.headers {
				b.SetHeaders(i, []byte(`{"a":"b"}`))
			}
			if tc.stamp {
				b.SetTimestamp(i, time.Unix(1, 0))
			}
		}
		for _, s := range []*Store{New("pgmsg"), New(long)} {
			// pgx names a statement prepared under its text "stmt_" and 48 hex digits.
			stmt := "stmt_" + strings.Repeat("f", 48)
			buf := s.encodeCopy(nil, stmt, stmt, 7, &b)
			if bound := b.copySize() + copyMessagesBytes; len(buf) > bound {
				t.Errorf("%s, schema %q: %d bytes encoded, more than the %d PublishCopy allocates", tc.name, s.schema, len(buf), bound)
			}
		}
	}
}

// Encoding a COPY publish into a buffer of the size PublishCopy gives it
// allocates nothing: the statements' texts are made once per store and the
// parameters are encoded from the stack.
func TestEncodeCopyAllocatesNothing(t *testing.T) {
	b := NewPublishBatch("t", 3, 100)
	for i := range b.Values {
		b.Values[i] = make([]byte, 1024)
		b.SetKey(i, []byte("k"))
	}
	s := New("pgmsg_x")
	s.copyTexts()
	buf := make([]byte, 0, b.copySize()+copyMessagesBytes)
	stmt := "stmt_" + strings.Repeat("f", 48)
	// AllocsPerRun counts the whole process's allocations, other tests'
	// goroutines included (the package's parallel tests, pools): the
	// fewest of a few measurements. An allocation of encodeCopy's own
	// shows in every one of them.
	least := -1.0
	for range 5 {
		n := testing.AllocsPerRun(20, func() { buf = s.encodeCopy(buf[:0], stmt, stmt, 7, &b) })
		if least < 0 || n < least {
			least = n
		}
		if least == 0 {
			break
		}
	}
	if least != 0 {
		t.Errorf("encodeCopy allocated %v times per publish, want 0", least)
	}
}
