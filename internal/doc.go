// Package internal is the parent of IOP's private helpers. Each
// sub-package has one purpose (internal/testpki, for example, makes test
// certificates); there is no catch-all helper package.
package internal
