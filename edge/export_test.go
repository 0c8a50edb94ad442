package edge

// SetMaxDecoded lowers s's bound on a decoded answer (maxDecoded), so a
// test reaches it without rendering 32 MiB. It must be called before s
// serves.
func SetMaxDecoded(s *Server, n int) { s.maxDecoded = n }
