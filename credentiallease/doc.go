// Package credentiallease will issue, seal, sign, open and verify credential
// leases: a hosted-API secret sealed to one Node's public key for one
// dispatch (principal, route, slot, target, connection generation, credential
// revision), short-lived, signed by the Edge, and usable once.
//
// It uses only the standard library's cryptography. It must never accept a
// lease it cannot verify completely (every failure is a typed refusal, with
// no fallback credential), never log a secret, and never keep one after the
// call that needed it. It is filled in by step [S8].
package credentiallease
