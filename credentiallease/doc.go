// Package credentiallease issues, seals, signs, opens and verifies
// credential leases: a hosted-API secret sealed to one Node's public key
// for one dispatch, short-lived, signed by the Edge, and usable once.
//
// The Edge's [Issuer] binds a lease to the principal, route, slot (the
// dispatch id), profile, target, node id and node key id, credential id
// and revision, and connection generation, with issued-at, not-before and
// an expiry at most [MaxTTL] later, and a random lease id. The secret is
// sealed with HPKE (RFC 9180, crypto/hpke: DHKEM(X25519, HKDF-SHA256),
// HKDF-SHA256, ChaCha20-Poly1305) whose info binds a hash of the header,
// and the whole envelope is signed with Ed25519ctx under
// [SignatureContext]. The envelope is a versioned binary format parsed
// strictly (exact lengths, nothing trailing); the signature is checked
// over the exact bytes received.
//
// The Node's [Opener] opens a lease only right before the provider call,
// after capacity admission, and checks, in order: size, pinned Edge key,
// signature, version and suite, recipient, every binding field against the
// dispatch it is executing, the time window with bounded skew (on a clock
// that never goes back), revocation and disabled profiles or routes
// ([Policy]), credential revision, connection generation, and single use
// through a [ReplayCache] that survives restarts. Every refusal is a
// *[RefusedError] with a typed reason; there is no fallback credential.
// [Secret] never prints its value; clear it after the call.
//
// Only the standard library's cryptography is used. Keys live in files of
// mode 0600 ([LoadOrCreateNodeKey], [LoadOrCreateSigningKey]); the Node's
// private key never leaves the Node.
package credentiallease
