package kafkasrv

import "hash/fnv"

// broker is one listener of the cluster.
type broker struct {
	id   int32
	host string
	port int32
}

// clusterView is the live brokers as this listener sees them, in node id
// order; partition leadership and group coordination are spread over them
// by a rule every listener computes alike.
type clusterView struct {
	brokers []broker
}

// cluster returns the current view of the cluster.
func (s *Server) cluster() clusterView {
	if v := s.liveView(); v != nil {
		return *v
	}
	host, port := s.advertised()
	return clusterView{brokers: []broker{{id: s.cfg.NodeID, host: host, port: port}}}
}

// NodeID returns this listener's node id (the registry's when
// Config.Cluster is set, once Serve started).
func (s *Server) NodeID() int32 {
	if r := s.registry.Load(); r != nil {
		return r.nodeID.Load()
	}
	return s.cfg.NodeID
}

// OwnsGroup reports whether this listener coordinates group: the rule
// every listener of the cluster computes alike over the live brokers.
// kafkagroup.Config.Owns is this.
func (s *Server) OwnsGroup(group string) bool {
	return s.cluster().coordinator(group).id == s.NodeID()
}

func (v clusterView) controller() int32 { return v.brokers[0].id }

// leader is the broker that leads (topic, partition): the partition's
// place in the ring of live brokers, shifted by a hash of the topic so
// that topics with few partitions do not all land on the first broker.
func (v clusterView) leader(topic string, partition int32) int32 {
	n := uint32(len(v.brokers))
	if n == 1 {
		return v.brokers[0].id
	}
	h := fnv.New32a()
	h.Write([]byte(topic))
	return v.brokers[(h.Sum32()+uint32(partition))%n].id
}

// coordinator is the broker that coordinates group.
func (v clusterView) coordinator(group string) broker {
	h := fnv.New32a()
	h.Write([]byte(group))
	return v.brokers[h.Sum32()%uint32(len(v.brokers))]
}
