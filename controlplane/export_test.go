package controlplane

// SetHelloHook calls f at stages of every hello h answers ("authenticated":
// the credential was checked, the connection not yet admitted).
func SetHelloHook(h *Hub, f func(stage string)) { h.testHookHello = f }
