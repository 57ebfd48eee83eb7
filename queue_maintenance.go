package pgmsg

import "context"

// The queue's maintenance tasks: claims rescue expired leases of their own
// queue already, so these cover queues nobody claims from, and keep the
// archive, and dead jobs, within each queue's retention.
func init() {
	registerMaintenanceTask(MaintenanceTask{Name: "queue.rescue", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.RescueJobs(ctx, "")
		return int64(n), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "queue.archive_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		return c.PruneArchive(ctx, "", nil)
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "queue.dead_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		return c.PruneDeadJobs(ctx, "")
	}})
}
