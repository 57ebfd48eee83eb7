package pgmsg

// TotalsReads returns how many full and partial reads LogTotals has made
// on c (for tests of its cache).
func TotalsReads(c *Client) (full, partial int) {
	c.totals.mu.Lock()
	defer c.totals.mu.Unlock()
	return c.totals.fullReads, c.totals.partReads
}
