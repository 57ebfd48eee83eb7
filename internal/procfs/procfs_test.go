package procfs_test

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/pgmsg/pgmsg/internal/procfs"
)

// A started child is among the test process's children, with its parent
// and command name read back.
func TestChildrenParentComm(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	require.Contains(t, procfs.Children(os.Getpid()), cmd.Process.Pid)
	pp, err := procfs.Parent(cmd.Process.Pid)
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), pp)
	require.Equal(t, "sleep", procfs.Comm(cmd.Process.Pid))
	require.False(t, slices.Contains(procfs.Children(cmd.Process.Pid), os.Getpid()))
	_, err = procfs.Stat(-1)
	require.Error(t, err)
}
