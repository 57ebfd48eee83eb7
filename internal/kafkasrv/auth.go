package kafkasrv

import "context"

// authState is a connection's authentication.
type authState struct{}

// authorize returns 0 when the connection's principal may do op on the
// resource, else the Kafka error code to answer.
func (c *conn) authorize(ctx context.Context, kind, name, op string) int16 {
	return c.s.authorizeCtx(ctx, kind, name, op)
}

// authorizeCtx is authorize for the principal ctx carries.
func (s *Server) authorizeCtx(context.Context, string, string, string) int16 { return 0 }

// Authorize reports whether the principal ctx carries (set by the
// listener on the requests it dispatches) may do op ("read", "write",
// "describe", "create", "delete", "alter") on the resource (kind "topic"
// or "group", name). kafkagroup.Config.Authorize is this.
func (s *Server) Authorize(ctx context.Context, kind, name, op string) bool {
	return s.authorizeCtx(ctx, kind, name, op) == 0
}
