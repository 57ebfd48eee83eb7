package pgcluster

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// prepareDataDir makes dir the server's private directory without ever
// following a symbolic link: it is created with mode 0700 if missing; an
// existing one must be a real directory (not a symlink) owned by the
// current user or by the server's user (uid, when running as root), else
// it is refused. Its owner and mode are then set through a descriptor
// (fchown/fchmod), so a link planted at the path in a shared directory such
// as /tmp cannot redirect them onto another file. uid < 0: no chown.
func prepareDataDir(dir string, uid, gid int) error {
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return err
	}
	// Mkdir does not follow a symlink at dir: it fails with EEXIST.
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
			return fmt.Errorf("pgcluster: data directory %s is a symbolic link or not a directory: refusing it "+
				"(remove it, or choose another directory)", dir)
		}
		return fmt.Errorf("pgcluster: open data directory %s: %w", dir, err)
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	owner, err := fileOwner(f)
	if err != nil {
		return err
	}
	if owner != os.Geteuid() && (uid < 0 || owner != uid) {
		return fmt.Errorf("pgcluster: data directory %s is owned by uid %d, not by this user (uid %d)%s: refusing it "+
			"(remove it, or choose another directory)", dir, owner, os.Geteuid(), serverUser(uid))
	}
	if uid >= 0 {
		if err := f.Chown(uid, gid); err != nil {
			return fmt.Errorf("pgcluster: chown data directory %s: %w", dir, err)
		}
	}
	if err := f.Chmod(0o700); err != nil {
		return fmt.Errorf("pgcluster: chmod data directory %s: %w", dir, err)
	}
	return nil
}

func serverUser(uid int) string {
	if uid < 0 {
		return ""
	}
	return fmt.Sprintf(" or the server's user (uid %d)", uid)
}

func fileOwner(f *os.File) (int, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("pgcluster: cannot tell the owner of %s", f.Name())
	}
	return int(sys.Uid), nil
}

// openLog opens the server log for appending without following a symlink,
// and only if it is a regular file with one link: the data directory
// belongs to the server's user, who must not be able to point root's
// writes elsewhere.
func openLog(path string, uid, gid int) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgcluster: open server log: %w", err)
	}
	st, err := f.Stat()
	if err == nil {
		if sys, ok := st.Sys().(*syscall.Stat_t); !st.Mode().IsRegular() || !ok || sys.Nlink != 1 {
			err = fmt.Errorf("pgcluster: server log %s is not a plain file: refusing it", path)
		}
	}
	if err == nil && uid >= 0 {
		// The server's user owns it, as everything in its data directory:
		// pg_basebackup (StartStandby) copies the directory as that user.
		err = f.Chown(uid, gid)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// writePrivateFile replaces dir/name with data, mode 0600, owned by uid
// (if >= 0): it writes a new file (O_EXCL, so never through a planted link)
// and renames it over the old name.
func writePrivateFile(dir, name string, data []byte, uid, gid int) error {
	f, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("pgcluster: write %s: %w", name, err)
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(0o600)
	}
	if err == nil && uid >= 0 {
		err = f.Chown(uid, gid)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("pgcluster: write %s: %w", name, err)
	}
	return nil
}

// ensurePassword returns the password kept in dir/PasswordFile, or
// generates one and keeps it there (mode 0600). A file that is a link, not
// owned by us or the server's user, readable by others, or not a password
// is replaced with a new password.
func ensurePassword(dir string, uid, gid int) (string, error) {
	if pw := readPassword(filepath.Join(dir, PasswordFile), uid); pw != "" {
		return pw, nil
	}
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	pw := hex.EncodeToString(b)
	if err := writePrivateFile(dir, PasswordFile, []byte(pw+"\n"), uid, gid); err != nil {
		return "", err
	}
	return pw, nil
}

func readPassword(path string, uid int) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return ""
	}
	if owner, err := fileOwner(f); err != nil || (owner != os.Geteuid() && owner != uid) {
		return ""
	}
	b := make([]byte, 128)
	n, _ := f.Read(b)
	pw := string(b[:n])
	if len(pw) > 0 && pw[len(pw)-1] == '\n' {
		pw = pw[:len(pw)-1]
	}
	if len(pw) != 48 {
		return ""
	}
	if _, err := hex.DecodeString(pw); err != nil {
		return ""
	}
	return pw
}
