package mirror

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the mirror's Prometheus figures, labelled by topic and
// partition: records mirrored, records skipped because Kafka already had
// them, the mirror group's lag, and failed produce requests.
type Metrics struct {
	mirrored *prometheus.CounterVec
	skipped  *prometheus.CounterVec
	lag      *prometheus.GaugeVec
	errors   prometheus.Counter
}

// NewMetrics registers the mirror's metrics with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	labels := []string{"topic", "partition"}
	m := &Metrics{
		mirrored: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgmsg_mirror_records_total",
			Help: "Records copied to Kafka and acknowledged by it."}, labels),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pgmsg_mirror_skipped_records_total",
			Help: "Records claimed again after a restart that Kafka already held (not written twice)."}, labels),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "pgmsg_mirror_lag_records",
			Help: "Records of the pgmsg partition the mirror has not copied yet (its group's lag)."}, labels),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "pgmsg_mirror_produce_errors_total",
			Help: "Produce requests to Kafka that failed (the claim is retried)."}),
	}
	for _, c := range []prometheus.Collector{m.mirrored, m.skipped, m.lag, m.errors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
