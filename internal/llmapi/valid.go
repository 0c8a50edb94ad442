package llmapi

import (
	"encoding/binary"
	"math/bits"
)

// Valid reports whether b is exactly one JSON value (RFC 8259) with
// optional surrounding whitespace. It accepts what encoding/json.Valid
// accepts and nothing else (a differential fuzz test holds it to that),
// but runs as one tight loop instead of a state machine called per byte:
// the Edge checks every request, answer and stream event it relays.
// Nesting deeper than encoding/json's limit (10000) is refused, as there.
func Valid(b []byte) bool {
	ok, _ := valid(b, "")
	return ok
}

// ValidFind is Valid that also reports whether some object in b, at any
// depth, has the key key (written without escapes) with an object as its
// value: the Edge's check of a stream event, which also tells it whether
// the event carries usage, in the one pass. found is false when b is not
// valid.
func ValidFind(b []byte, key string) (ok, found bool) {
	return valid(b, key)
}

func valid(b []byte, key string) (ok, found bool) {
	const maxDepth = 10000
	var inline [64]byte
	stack := inline[:0] // '{' or '[' per open container
	i := skipWS(b, 0)
	for {
		// A value starts at b[i].
		if i >= len(b) {
			return false, false
		}
		switch c := b[i]; {
		case c == '{' || c == '[':
			if len(stack) >= maxDepth {
				return false, false
			}
			i = skipWS(b, i+1)
			if i < len(b) && b[i] == closer(c) {
				i++
				break
			}
			stack = append(stack, c)
			if c == '{' {
				k := i
				if i = objectKey(b, i); i < 0 {
					return false, false
				}
				found = found || isKey(b, k, i, key)
			}
			continue
		case c == '"':
			if i = endOfString(b, i); i < 0 {
				return false, false
			}
		case c == '-' || (c >= '0' && c <= '9'):
			if i = endOfNumber(b, i); i < 0 {
				return false, false
			}
		case c == 't':
			if !hasLiteral(b, i, "true") {
				return false, false
			}
			i += 4
		case c == 'f':
			if !hasLiteral(b, i, "false") {
				return false, false
			}
			i += 5
		case c == 'n':
			if !hasLiteral(b, i, "null") {
				return false, false
			}
			i += 4
		default:
			return false, false
		}
		// A value ended just before b[i]: close containers, or move to the
		// next element.
		for {
			i = skipWS(b, i)
			if len(stack) == 0 {
				if i != len(b) {
					return false, false
				}
				return true, found
			}
			if i >= len(b) {
				return false, false
			}
			top := stack[len(stack)-1]
			c := b[i]
			if c == ',' {
				i = skipWS(b, i+1)
				if top == '{' {
					k := i
					if i = objectKey(b, i); i < 0 {
						return false, false
					}
					found = found || isKey(b, k, i, key)
				}
				break // the next value
			}
			if c == closer(top) {
				stack = stack[:len(stack)-1]
				i++
				continue
			}
			return false, false
		}
	}
}

// isKey reports whether the object key starting at b[k] (its '"') is
// key, with an object as its value at b[v]. An empty key is never found.
func isKey(b []byte, k, v int, key string) bool {
	return key != "" && v < len(b) && b[v] == '{' && len(b)-k > len(key)+1 &&
		b[k+1+len(key)] == '"' && string(b[k+1:k+1+len(key)]) == key
}

// closer returns the byte that closes the container open opens.
func closer(open byte) byte {
	if open == '{' {
		return '}'
	}
	return ']'
}

// objectKey checks `"key" :` at b[i] and returns the index after the colon
// and any whitespace, or -1.
func objectKey(b []byte, i int) int {
	if i >= len(b) || b[i] != '"' {
		return -1
	}
	if i = endOfString(b, i); i < 0 {
		return -1
	}
	i = skipWS(b, i)
	if i >= len(b) || b[i] != ':' {
		return -1
	}
	return skipWS(b, i+1)
}

// endOfString returns the index after the string starting at b[i] (a
// '"'), or -1 when it is not a valid JSON string: unterminated, a control
// character, or a bad escape. Bytes from 0x80 up pass unchecked, as in
// encoding/json.Valid.
func endOfString(b []byte, i int) int {
	for i++; ; i++ {
		if i = stringStop(b, i); i >= len(b) {
			return -1
		}
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c < 0x20:
			return -1
		default: // '\\'
			i++
			if i >= len(b) {
				return -1
			}
			switch b[i] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
			case 'u':
				if i+4 >= len(b) {
					return -1
				}
				for _, h := range b[i+1 : i+5] {
					if !isHex(h) {
						return -1
					}
				}
				i += 4
			default:
				return -1
			}
		}
	}
}

// stringStop returns the index of the first byte from b[i] on that a scan
// of a string must look at: '"', '\\' or a control character; len(b) if
// there is none. Bytes from 0x80 up are not among them (a string's UTF-8
// is not checked, as in encoding/json.Valid).
//
// It reads eight bytes at a time with the classic "has a zero byte" and
// "has a byte below n" tests on a 64-bit word: the high bit of hit is set
// at the first byte that is a quote, a backslash or below 0x20 (higher
// bytes may be flagged falsely, a lower one never, so the lowest flag is
// exact). A byte from 0x80 up has its own high bit set, which the &^
// clears. The word may reach past the string's end into the bytes after
// it, never past b's. A long prompt is checked about three times as fast
// as byte by byte (BenchmarkValidLong).
func stringStop(b []byte, i int) int {
	const (
		ones = 0x0101010101010101
		high = 0x8080808080808080
	)
	for ; len(b)-i >= 8; i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		q := x ^ (ones * '"')
		s := x ^ (ones * '\\')
		hit := (((q - ones) &^ q) | ((s - ones) &^ s) | ((x - ones*0x20) &^ x)) & high
		if hit != 0 {
			return i + bits.TrailingZeros64(hit)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
			return i
		}
	}
	return i
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

// endOfNumber returns the index after the number starting at b[i], or -1:
// -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func endOfNumber(b []byte, i int) int {
	if b[i] == '-' {
		i++
	}
	switch {
	case i >= len(b):
		return -1
	case b[i] == '0':
		i++
	case b[i] >= '1' && b[i] <= '9':
		i = digits(b, i+1)
	default:
		return -1
	}
	if i < len(b) && b[i] == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return -1
		}
		i = j
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		j := digits(b, i)
		if j == i {
			return -1
		}
		i = j
	}
	return i
}

func digits(b []byte, i int) int {
	for i < len(b) && b[i] >= '0' && b[i] <= '9' {
		i++
	}
	return i
}

func hasLiteral(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}
