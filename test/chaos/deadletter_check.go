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

// checkDeadLetters checks the group consumed with Consumer.Run and
// MaxDeliveries: every stored poison record was set aside in the
// dead-letter topic exactly once (with its own id) and never handled;
// every other stored record was handled at least once and never set
// aside; the group's cursor reached the end of every partition.
func checkDeadLetters(r *Report, events []Event, db *DBState, group string) {
	handled := map[int32]map[int64]bool{}
	for _, ev := range events {
		if ev.K != "dlqh" || ev.G != group {
			continue
		}
		if handled[ev.P] == nil {
			handled[ev.P] = map[int64]bool{}
		}
		handled[ev.P][ev.O] = true
		if PoisonRecord(ev.ID) {
			r.violate("dlq-poison-handled", "poison record %s at partition %d offset %d was handled", ev.ID, ev.P, ev.O)
		}
	}
	for p, offs := range db.Log {
		for o, id := range offs {
			dead := db.DeadLetters[p][o]
			switch {
			case PoisonRecord(id) && len(dead) == 0:
				r.violate("dlq-missing", "poison record %s at partition %d offset %d is not in the dead-letter topic", id, p, o)
			case PoisonRecord(id) && len(dead) > 1:
				r.violate("dlq-twice", "poison record %s at partition %d offset %d set aside %d times", id, p, o, len(dead))
			case PoisonRecord(id) && dead[0] != id:
				r.violate("dlq-mismatch", "partition %d offset %d holds %s, its dead letter %s", p, o, id, dead[0])
			case PoisonRecord(id):
				r.DeadLettered++
			case len(dead) > 0:
				r.violate("dlq-wrong", "record %s at partition %d offset %d was set aside", id, p, o)
			case !handled[p][o]:
				r.violate("dlq-unhandled", "record %s at partition %d offset %d was never handled by %s", id, p, o, group)
			default:
				r.DeadLetterHandled++
			}
		}
	}
	for p, offs := range db.DeadLetters {
		for o := range offs {
			if _, ok := db.Log[p][o]; !ok {
				r.violate("dlq-phantom", "a dead letter names partition %d offset %d, which is not stored", p, o)
			}
		}
	}
	for p, se := range db.Partitions {
		if c := db.Cursors[group][p]; c != se[1] {
			r.violate("dlq-cursor", "group %s partition %d at %d, end %d", group, p, c, se[1])
		}
	}
}
