package pgmsg_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg"
)

// The volume that holds a topic's segments fills up (a 16 MiB tmpfs as a
// tablespace, filled by a file): publishes fail with ErrDiskFull (PM021)
// and store nothing, every acknowledged record stays readable by a group,
// and publishing resumes by itself once the file is removed. Needs root
// (mount) and a server on this machine; skipped otherwise.
func TestDiskFull(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("mounts a tmpfs: needs root")
	}
	tb := setup(t, nil)
	pgUser, err := user.Lookup("postgres")
	if err != nil {
		t.Skip("no postgres user")
	}
	dir, err := os.MkdirTemp("", "pgmsg-diskfull-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a tmpfs: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
	uid, _ := strconv.Atoi(pgUser.Uid)
	gid, _ := strconv.Atoi(pgUser.Gid)
	require.NoError(t, os.Chown(dir, uid, gid))
	var local bool // the tablespace's directory must be on the server's machine
	require.NoError(t, tb.Pool.QueryRow(tb.ctx, `SELECT pg_catalog.inet_server_addr() IS NULL
		OR pg_catalog.host(pg_catalog.inet_server_addr()) IN ('127.0.0.1', '::1')`).Scan(&local))
	if !local {
		t.Skip("the server is not on this machine")
	}
	ts := "pgmsg_diskfull_" + strconv.Itoa(os.Getpid())
	_, err = tb.Pool.Exec(tb.ctx, fmt.Sprintf(`CREATE TABLESPACE %s LOCATION '%s'`, ts, dir))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = tb.client.DeleteTopic(tb.ctx, "df")
		_, _ = tb.Pool.Exec(tb.ctx, "DROP TABLESPACE IF EXISTS "+ts)
	})

	_, err = tb.client.CreateTopic(tb.ctx, "df", pgmsg.TopicConfig{Partitions: 1, SegmentRecords: 1 << 20})
	require.NoError(t, err)
	s := pgx.Identifier{tb.Schema}.Sanitize()
	rows, err := tb.Pool.Query(tb.ctx, fmt.Sprintf(`SELECT sg.relname FROM %[1]s.segment sg JOIN %[1]s.topic t USING (topic_id)
		WHERE t.name = 'df'`, s))
	require.NoError(t, err)
	segs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for _, rel := range segs {
		_, err := tb.Pool.Exec(tb.ctx, fmt.Sprintf("ALTER TABLE %s.%s SET TABLESPACE %s", s, pgx.Identifier{rel}.Sanitize(), ts))
		require.NoError(t, err)
	}
	// Leave about 2 MiB free.
	filler := filepath.Join(dir, "filler")
	require.NoError(t, os.WriteFile(filler, make([]byte, 14<<20), 0o600))

	// Random values of 64 KiB, which compression cannot shrink.
	rnd := rand.New(rand.NewChaCha8([32]byte{1}))
	acked := map[int64]string{}
	var full error
	for i := 0; i < 200 && full == nil; i++ {
		v := make([]byte, 64<<10)
		for j := range v {
			v[j] = byte(rnd.Uint32())
		}
		rec := &pgmsg.Record{Topic: "df", Value: v}
		if err := tb.client.Publish(tb.ctx, []*pgmsg.Record{rec}, nil); err != nil {
			full = err
			break
		}
		acked[rec.Offset] = string(v)
	}
	require.Error(t, full, "the volume never filled")
	require.ErrorIs(t, full, pgmsg.ErrDiskFull)
	require.Equal(t, "PM021", pgmsg.ErrorCode(full))
	t.Logf("disk full after %d records: %v", len(acked), full)

	// Every acknowledged record is there, in order, without a gap.
	readAll := func(group string) map[int64]string {
		got := map[int64]string{}
		for {
			cl, err := tb.client.Claim(tb.ctx, "df", group, &pgmsg.ClaimOpts{MaxRecords: 500})
			require.NoError(t, err)
			if cl == nil {
				return got
			}
			for _, r := range cl.Records {
				got[r.Offset] = string(r.Value)
			}
			require.NoError(t, tb.client.Commit(tb.ctx, cl))
		}
	}
	require.Equal(t, acked, readAll("g"))

	// Space returns: publishing resumes, and the group reads on.
	require.NoError(t, os.Remove(filler))
	rec := &pgmsg.Record{Topic: "df", Value: []byte("after")}
	require.NoError(t, tb.client.Publish(tb.ctx, []*pgmsg.Record{rec}, nil))
	require.Equal(t, int64(len(acked)), rec.Offset)
	require.Equal(t, map[int64]string{rec.Offset: "after"}, readAll("g"))
}
