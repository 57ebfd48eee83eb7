package kafkasrv

// Kill stops the listener as a killed process would: its registration is
// left to expire instead of being removed.
func (s *Server) Kill() error {
	if r := s.registry.Load(); r != nil {
		r.abandon.Store(true)
	}
	return s.Close()
}

// FetchCacheServed is how many records Fetches took from the record cache.
func (s *Server) FetchCacheServed() int64 {
	s.fetchCache.mu.Lock()
	defer s.fetchCache.mu.Unlock()
	return s.fetchCache.served
}
