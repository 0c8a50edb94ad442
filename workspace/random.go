package workspace

import (
	"crypto/rand"
	"encoding/hex"
)

func randomName() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
