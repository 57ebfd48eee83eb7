package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgmsg/pgmsg/internal/pgcluster"
)

// fullVolSize is the size of the DiskFull volume between faults: room for
// a goal run's records and jobs (a tmpfs takes memory only for what is
// written).
const fullVolSize = 4 << 30

// fullTablespace is the tablespace on the DiskFull volume.
const fullTablespace = "chaos_full"

// setupDiskFull mounts a tmpfs, makes it a tablespace, and moves onto it
// what publishes and enqueues write: the topic's segments (and, as the
// database's default_tablespace, the segments made later, with their
// indexes) and the queue's job and job_payload tables. Their indexes, the
// partition counters, the cursors, the archive and the WAL stay on the
// data directory's volume: a full volume then fails the statements that
// need a new page there, with SQLSTATE 53100 (PM021), and nothing else.
func (h *Harness) setupDiskFull(ctx context.Context) error {
	if os.Geteuid() != 0 {
		return errors.New("chaos: DiskFull mounts a tmpfs: needs root")
	}
	dir := filepath.Join(h.dir, "fullvol")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", fullVolSize)); err != nil {
		return fmt.Errorf("chaos: mount a tmpfs on %s: %w", dir, err)
	}
	h.fullVol = dir
	if cred, uid, gid, err := pgcluster.Credential(); err != nil {
		return err
	} else if cred != nil {
		if err := os.Chown(dir, uid, gid); err != nil {
			return err
		}
	}
	if _, err := h.admin.Exec(ctx, fmt.Sprintf("CREATE TABLESPACE %s LOCATION '%s'", fullTablespace, dir)); err != nil {
		return err
	}
	rows, err := h.admin.Query(ctx, `SELECT DISTINCT i.inhparent::regclass::text FROM pgmsg.segment sg
		JOIN pgmsg.topic t USING (topic_id)
		JOIN pg_catalog.pg_inherits i ON i.inhrelid = ('pgmsg.' || pg_catalog.quote_ident(sg.relname))::regclass
		WHERE t.name = $1
		UNION ALL
		SELECT 'pgmsg.' || pg_catalog.quote_ident(sg.relname) FROM pgmsg.segment sg JOIN pgmsg.topic t USING (topic_id) WHERE t.name = $1
		UNION ALL
		SELECT unnest(ARRAY['pgmsg.job', 'pgmsg.job_payload'])`, topicName)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := h.admin.Exec(ctx, fmt.Sprintf("ALTER TABLE %s SET TABLESPACE %s", t, fullTablespace)); err != nil {
			return fmt.Errorf("chaos: move %s: %w", t, err)
		}
	}
	// pgmsg makes a segment with CREATE TABLE ... (LIKE ...) and ATTACH
	// PARTITION, which takes default_tablespace, not the partitioned
	// table's: the agents' sessions (they connect after this) put the
	// segments they make on the volume too.
	if _, err := h.admin.Exec(ctx, "ALTER DATABASE postgres SET default_tablespace = "+fullTablespace); err != nil {
		return err
	}
	h.o.Logf("chaos: %d tables on the DiskFull tablespace (tmpfs %s)", len(tables), dir)
	return nil
}

// fillDisk shrinks the DiskFull volume to what it holds (a tmpfs can be
// remounted down to its use, not below), so that the next page any table
// on it needs fails with ENOSPC, for lease + 1-2 s, then gives it its size
// back.
func (h *Harness) fillDisk(ctx context.Context) (string, bool) {
	if h.fullVol == "" {
		return "no DiskFull volume", false
	}
	var used uint64
	var err error
	for range 20 {
		var st syscall.Statfs_t
		if err = syscall.Statfs(h.fullVol, &st); err != nil {
			break
		}
		used = (st.Blocks - st.Bfree) * uint64(st.Bsize)
		// EINVAL when the volume grew past used meanwhile: measure again.
		if err = syscall.Mount("tmpfs", h.fullVol, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", used)); err == nil {
			break
		}
	}
	if err != nil {
		return "shrink: " + err.Error(), false
	}
	d := h.o.Lease + time.Second + time.Duration(rand.Int64N(int64(time.Second)))
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	if err := syscall.Mount("tmpfs", h.fullVol, "tmpfs", syscall.MS_REMOUNT, fmt.Sprintf("size=%d", fullVolSize)); err != nil {
		h.addUnplanned("disk full: give the volume its size back: " + err.Error())
		return "grow: " + err.Error(), false
	}
	return fmt.Sprintf("volume of the segments and jobs full (%.1f MiB in use) for %s", float64(used)/(1<<20), d.Round(time.Millisecond)), true
}
