package faulttest

// cleanupBinaries removes the daemon binaries the process scenarios built.
func cleanupBinaries() {}
