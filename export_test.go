package pgmsg

import (
	"context"
	"time"
)

// TotalsReads returns how many full and partial reads LogTotals has made
// on c, and how many calls found the snapshot of the last read (for tests
// of its cache).
func TotalsReads(c *Client) (full, partial, same int) {
	c.totals.mu.Lock()
	defer c.totals.mu.Unlock()
	return c.totals.fullReads, c.totals.partReads, c.totals.sameReads
}

// MaintenanceGate is RunMaintenance's memory of the gated tasks' runs.
type MaintenanceGate = maintenanceGate

// NewMaintenanceGate returns a gate reading the database's snapshot, or
// calling snapshot instead when it is not nil.
func NewMaintenanceGate(c *Client, snapshot func() string) *MaintenanceGate {
	g := c.newMaintenanceGate()
	if snapshot != nil {
		g.snapshot = func(context.Context) (string, error) { return snapshot(), nil }
	}
	return g
}

// MaintainGated runs one of RunMaintenance's passes.
func MaintainGated(ctx context.Context, c *Client, cfg *MaintenanceConfig, g *MaintenanceGate) (*MaintenanceResult, error) {
	return c.maintain(ctx, cfg.withDefaults(), g)
}

// ClaimCap returns the records cap of cn's next claim.
func ClaimCap(cn *Consumer) int { return cn.e.ClaimCap() }

// ClaimPacerState returns how many of c's consumers its claim budget
// counts busy now, whether it is engaged, and the interval it gives
// (0, false, 0: no budget).
func ClaimPacerState(c *Client) (int, bool, time.Duration) { return c.claimPacer.State(time.Now()) }
