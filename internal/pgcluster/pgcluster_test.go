package pgcluster

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

func needBinaries(t *testing.T) {
	t.Helper()
	if _, err := FindBinaries(); err != nil {
		t.Skip(err)
	}
}

// testParent is a directory the server's user can enter (as root, it is
// "postgres", and os.MkdirTemp makes 0700 directories).
func testParent(t *testing.T) string {
	t.Helper()
	parent, err := os.MkdirTemp("", "pgmsg-pgcluster-test-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))
	return parent
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	st, err := os.Lstat(path)
	require.NoError(t, err)
	return int(st.Sys().(*syscall.Stat_t).Uid)
}

// startExpectingRefusal starts a cluster that must be refused, stopping it
// if it was not (older code started one).
func startExpectingRefusal(t *testing.T, dir string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{DataDir: dir})
	if c != nil {
		_ = c.Stop()
	}
	return err
}

// A data directory path that is a symlink (as one another local
// user could plant at a predictable /tmp path) must be refused, not
// followed: neither chowned nor initialised.
func TestStartRefusesSymlinkDataDir(t *testing.T) {
	needBinaries(t)
	parent := testParent(t)
	target := filepath.Join(parent, "target")
	require.NoError(t, os.Mkdir(target, 0o755))
	link := filepath.Join(parent, "data")
	require.NoError(t, os.Symlink(target, link))

	err := startExpectingRefusal(t, link)
	require.Error(t, err)
	require.Contains(t, err.Error(), "symbolic link")
	require.Equal(t, os.Geteuid(), ownerOf(t, target), "the link's target must not be chowned")
	_, err = os.Stat(filepath.Join(target, "PG_VERSION"))
	require.True(t, os.IsNotExist(err), "nothing may be initialised through the link")
	st, err := os.Stat(target)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o755), st.Mode().Perm(), "the link's target must not be chmodded")
}

// An existing data directory owned by someone else (another
// local user who created the predictable path first) must be refused, not
// taken over.
func TestStartRefusesForeignDataDir(t *testing.T) {
	needBinaries(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory owned by another user")
	}
	parent := testParent(t)
	dir := filepath.Join(parent, "data")
	require.NoError(t, os.Mkdir(dir, 0o777))
	const nobody = 65534
	require.NoError(t, os.Chown(dir, nobody, nobody))

	err := startExpectingRefusal(t, dir)
	require.Error(t, err)
	require.Contains(t, err.Error(), "owned by uid 65534")
	require.Equal(t, nobody, ownerOf(t, dir))
}

// With PasswordAuth (pgmsg dev), TCP connections need the
// generated password, which is kept private in the data directory and
// reused by the next start on the same directory.
func TestPasswordAuth(t *testing.T) {
	needBinaries(t)
	parent := testParent(t)
	dir := filepath.Join(parent, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := Start(ctx, Options{DataDir: dir, PasswordAuth: true})
	require.NoError(t, err)
	u, err := url.Parse(c.URL)
	require.NoError(t, err)
	pw, ok := u.User.Password()
	require.True(t, ok, "the URL carries the password: %s", c.URL)
	require.Len(t, pw, 48)

	conn, err := pgx.Connect(ctx, c.URL)
	require.NoError(t, err)
	var method string
	require.NoError(t, conn.QueryRow(ctx, "SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host' LIMIT 1").Scan(&method))
	require.Equal(t, "scram-sha-256", method)
	require.NoError(t, conn.Close(ctx))
	u.User = url.User("postgres")
	_, err = pgx.Connect(ctx, u.String())
	require.Error(t, err, "TCP without the password is refused")
	u.User = url.UserPassword("postgres", strings.Repeat("0", 48))
	_, err = pgx.Connect(ctx, u.String())
	require.Error(t, err, "TCP with a wrong password is refused")

	st, err := os.Lstat(filepath.Join(dir, PasswordFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode())
	st, err = os.Lstat(dir)
	require.NoError(t, err)
	require.Equal(t, os.ModeDir|0o700, st.Mode())
	require.NoError(t, c.Stop())

	c2, err := Start(ctx, Options{DataDir: dir, PasswordAuth: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, c2.Stop()) }()
	u2, err := url.Parse(c2.URL)
	require.NoError(t, err)
	pw2, _ := u2.User.Password()
	require.Equal(t, pw, pw2, "a reused data directory keeps its password")
}

// A data directory made by trust-only code (an older pgmsg dev) gets the
// password on its next PasswordAuth start.
func TestPasswordAuthUpgradesTrustDir(t *testing.T) {
	needBinaries(t)
	parent := testParent(t)
	dir := filepath.Join(parent, "data")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{DataDir: dir})
	require.NoError(t, err)
	require.NoError(t, c.Stop())
	c, err = Start(ctx, Options{DataDir: dir, PasswordAuth: true})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Stop()) }()
	u, err := url.Parse(c.URL)
	require.NoError(t, err)
	u.User = url.User("postgres")
	_, err = pgx.Connect(ctx, u.String())
	require.Error(t, err, "TCP without the password is refused")
}
