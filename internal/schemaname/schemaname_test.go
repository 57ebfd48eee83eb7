package schemaname

import (
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	for _, ok := range []string{Default, "_x", "a1_b", "A" + strings.Repeat("b", 47)} {
		if err := Validate(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
	// The channel is schema + "_log", at most 63 bytes.
	for _, bad := range []string{"", "1a", "a-b", "a b", `a"b`, "A" + strings.Repeat("b", 48), "ä"} {
		if err := Validate(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
