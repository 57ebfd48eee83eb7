package maintenance

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

// RunOnce runs every task in the order given, the ones after a failure
// too, and returns each task's result by name and the errors joined,
// each naming its task.
func TestRunOnce(t *testing.T) {
	t.Parallel()
	var ran []string
	boom := errors.New("boom")
	task := func(name string, n int64, err error) Task {
		return Task{Name: name, Run: func(context.Context) (int64, error) {
			ran = append(ran, name)
			return n, err
		}}
	}
	results, err := RunOnce(context.Background(), []Task{task("b", 2, nil), task("a", 1, boom), task("c", 3, nil)})
	require.Equal(t, []string{"b", "a", "c"}, ran)
	require.ErrorIs(t, err, boom)
	require.EqualError(t, err, "maintenance task a: boom")
	require.Len(t, results, 3)
	require.Equal(t, int64(2), results["b"].Items)
	require.NoError(t, results["b"].Err)
	require.Equal(t, int64(1), results["a"].Items)
	require.ErrorIs(t, results["a"].Err, boom)
	require.Equal(t, int64(3), results["c"].Items)

	results, err = RunOnce(context.Background(), nil)
	require.NoError(t, err)
	require.Empty(t, results)
}
