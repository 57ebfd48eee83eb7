package pgmsgtest

// WithoutMain makes New behave as without Main until restore is called:
// migrate in the test, drop in its cleanup.
func WithoutMain() (restore func()) {
	inMain.Store(false)
	return func() { inMain.Store(true) }
}
