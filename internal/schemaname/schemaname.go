// Package schemaname holds the rule for the schema pgmsg lives in, shared
// by the client (which only reads the schema) and the migrator (which
// creates it), so that neither imports the other for it.
package schemaname

import (
	"fmt"
	"regexp"
)

// Default is the schema pgmsg installs into when none is given.
const Default = "pgmsg"

var re = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,47}$`)

// Validate reports whether name can be pgmsg's schema: a letter or
// underscore then up to 47 letters, digits or underscores (the
// notification channel name adds a suffix and must fit in 63 bytes).
func Validate(name string) error {
	if !re.MatchString(name) {
		return fmt.Errorf("invalid schema name %q: use a letter or _ then up to 47 letters, digits or _", name)
	}
	return nil
}
