package pgmsg

import "context"

// The queue's maintenance tasks: claims rescue expired leases of their own
// queue already, so these cover queues nobody claims from, and keep the
// archive, and dead jobs, within each queue's retention; the due ticks
// of periodic jobs are enqueued, and passed uniqueness windows go.
func init() {
	registerMaintenanceTask(MaintenanceTask{Name: "queue.rescue", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.RescueJobs(ctx, "")
		return int64(n), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "queue.archive_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		return c.PruneArchive(ctx, "", nil)
	}})
	// The leader also runs this one every second (leadMaintenance), as
	// ticks can be seconds apart.
	registerMaintenanceTask(MaintenanceTask{Name: "queue.periodic", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		ticks, err := c.EnqueueDuePeriodicJobs(ctx)
		return int64(len(ticks)), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "queue.unique_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		n, err := c.store.JobUniquePrune(ctx, c.pool, 10000)
		return int64(n), err
	}})
	registerMaintenanceTask(MaintenanceTask{Name: "queue.dead_prune", Run: func(ctx context.Context, c *Client, _ MaintenanceConfig) (int64, error) {
		return c.PruneDeadJobs(ctx, "")
	}})
}
