package pgmsgtest

// Runner is what TestMain runs: a *testing.M.
type Runner interface{ Run() int }

type mainRunner struct{ m Runner }

func (r mainRunner) Run() int { return run(r.m) }

// WithMain wraps m to run as Main runs it, without exiting, so that the
// package's tests can run under pgtest.Main too.
func WithMain(m Runner) Runner { return mainRunner{m} }

// WithoutMain makes New behave as without Main until restore is called:
// migrate in the test, drop in its cleanup.
func WithoutMain() (restore func()) {
	inMain.Store(false)
	return func() { inMain.Store(true) }
}
