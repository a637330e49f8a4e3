package server

// SetHealth sets a component of the service's health, as SIGTERM or a
// backend outage would, for the tests of package server_test.
func (s *Server) SetHealth(component string, ok bool) { s.health.set(component, ok) }
