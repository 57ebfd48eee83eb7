package chaos

import (
	"strconv"
	"strings"
)

// PoisonRecord reports whether the record with this id (a chaos agent's
// "<name>-<n>") is one the dead-letter group's handler always fails on:
// about one in 97.
func PoisonRecord(id string) bool {
	i := strings.LastIndexByte(id, '-')
	n, err := strconv.Atoi(id[i+1:])
	return err == nil && n%97 == 0
}
