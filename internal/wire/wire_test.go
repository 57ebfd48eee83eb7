package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

func TestEncodeValue(t *testing.T) {
	for _, c := range []struct {
		name, enc string
		in        []byte
		out, used string
	}{
		{"no value", EncodingAuto, nil, `null`, ""},
		{"the JSON text null", EncodingAuto, []byte(`null`), `null`, EncodingJSON},
		{"JSON", EncodingAuto, []byte(`{"a":1}`), `{"a":1}`, EncodingJSON},
		{"text", EncodingAuto, []byte(`hello`), `"hello"`, EncodingText},
		{"binary", EncodingAuto, []byte{0xff, 0}, `"/wA="`, EncodingBase64},
		{"lone surrogate is text, not JSON", EncodingAuto, []byte(`"\ud800"`), `"\"\\ud800\""`, EncodingText},
		{"JSON asked, not JSON", EncodingJSON, []byte(`hello`), `"aGVsbG8="`, EncodingBase64},
		{"text asked, not UTF-8", EncodingText, []byte{0xff}, `"/w=="`, EncodingBase64},
		{"base64 asked", EncodingBase64, []byte(`{}`), `"e30="`, EncodingBase64},
	} {
		out, used := EncodeValue(c.in, c.enc)
		require.Equal(t, c.out, string(out), c.name)
		require.Equal(t, c.used, used, c.name)
		require.True(t, json.Valid(out), c.name)
	}
}

// Times are rendered in UTC whatever the process's zone.
func TestEncodeRecordUTC(t *testing.T) {
	tokyo := time.FixedZone("JST", 9*3600)
	r := EncodeRecord(&pgmsg.Record{Topic: "t", Key: []byte{0xff}, Value: []byte(`1`),
		Headers: map[string][]byte{"h": []byte("v")}, Timestamp: time.Date(2026, 1, 1, 9, 0, 0, 0, tokyo)}, EncodingAuto)
	require.Equal(t, time.UTC, r.Timestamp.Location())
	require.Equal(t, 0, r.Timestamp.Hour())
	require.Equal(t, EncodingBase64, r.KeyEncoding)
	require.Equal(t, EncodingText, r.HeadersEncoding)
	at := time.Date(2026, 1, 1, 9, 0, 0, 0, tokyo)
	j := EncodeJob(&pgmsg.Job{ID: 1, Payload: []byte("x"), RunAt: &at, EnqueuedAt: at}, EncodingAuto)
	require.Equal(t, time.UTC, j.RunAt.Location())
	require.Equal(t, EncodingText, j.PayloadEncoding)
}

func TestParseTime(t *testing.T) {
	got, err := ParseTime("--since", "2026-12-01T10:00:00.5+02:00")
	if err != nil || !got.Equal(time.Date(2026, 12, 1, 8, 0, 0, 500_000_000, time.UTC)) {
		t.Fatalf("ParseTime = %v, %v", got, err)
	}
	got, err = ParseTime("--since", "2026-12-01 10:00:00Z")
	require.NoError(t, err)
	require.True(t, got.Equal(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)))
	// A duration ago: between the clock before and after the call.
	before := time.Now()
	got, err = ParseTime("--since", "1h30m")
	require.NoError(t, err)
	require.False(t, got.Before(before.Add(-90*time.Minute)))
	require.False(t, got.After(time.Now().Add(-90*time.Minute)))
	// What PostgreSQL or Go alone would take is refused: one rule everywhere.
	for _, bad := range []string{"yesterday", "now", "epoch", "2026-12-01", "2026-12-01T10:00:00", "-1h", "1d", "5us", ""} {
		_, err := ParseTime("--since", bad)
		require.EqualError(t, err, `--since must be an RFC 3339 time (2026-12-01T10:00:00Z) or a duration ago (90m, 1h30m), got "`+bad+`"`)
	}
}
