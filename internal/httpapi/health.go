package httpapi

import (
	"context"
	"net/http"
	"time"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/pgmsgmigrate"
)

func (s *Server) healthRoutes() []Route {
	return []Route{
		{Method: http.MethodGet, Pattern: "/healthz", handler: s.healthz},
		{Method: http.MethodGet, Pattern: "/readyz", handler: s.readyz},
		{Method: http.MethodGet, Pattern: metricsPattern, Scope: s.metricsScope(), handler: s.serveMetrics},
	}
}

// metricsScope is what /metrics needs: nothing, or the admin scope with
// Config.MetricsAuth.
func (s *Server) metricsScope() string {
	if s.cfg.MetricsAuth {
		return pgmsg.ScopeAdmin
	}
	return ""
}

// healthz answers while the process is up.
func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) error {
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

// readyz answers 200 when the database is reachable and migrated to this
// binary's version, else 503.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) error {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	if s.draining() {
		return newAPIError(errShuttingDown, "the server is shutting down")
	}
	if err := s.client.Pool().Ping(ctx); err != nil {
		return newAPIError(errUnavailable, "database unreachable: %v", err)
	}
	m, err := pgmsgmigrate.New(s.client.Pool(), &pgmsgmigrate.Opts{Schema: s.client.Schema()})
	if err != nil {
		return err
	}
	if err := m.RequireCurrent(ctx); err != nil {
		return newAPIError(errUnavailable, "%v", err)
	}
	return writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}
