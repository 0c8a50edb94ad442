package workspace

import (
	"errors"
	"strings"
	"unicode/utf8"
)

// Path limits.
const (
	MaxPathLen   = 1024
	MaxPathDepth = 32
	maxNameLen   = 255
)

// reservedName reports whether a path component belongs to IOP: .iop in
// any letter case, and the temporary names writes use.
func reservedName(name string) bool {
	l := strings.ToLower(name)
	return l == ".iop" || strings.HasPrefix(l, tempPrefix)
}

// tempPrefix starts the names of temporary files writes create.
const tempPrefix = ".iop-tmp-"

// splitPath checks a request path's text and returns its components. The
// rules: relative; valid UTF-8; no NUL; no empty, "." or ".." component
// (so no leading, doubled or trailing slash); at most MaxPathLen bytes and
// MaxPathDepth components; no reserved component. "." alone names the
// root itself (for List).
func splitPath(op, p string) ([]string, error) {
	if p == "." {
		return nil, nil
	}
	switch {
	case p == "":
		return nil, fail(CodeInvalidPath, op, p, errors.New("empty path"))
	case len(p) > MaxPathLen:
		return nil, fail(CodeInvalidPath, op, "", errors.New("path too long"))
	case !utf8.ValidString(p):
		return nil, fail(CodeInvalidPath, op, "", errors.New("path is not UTF-8"))
	case strings.ContainsRune(p, 0):
		return nil, fail(CodeInvalidPath, op, "", errors.New("NUL in path"))
	case strings.HasPrefix(p, "/"):
		return nil, fail(CodeInvalidPath, op, p, errors.New("absolute path"))
	case strings.HasSuffix(p, "/"):
		return nil, fail(CodeInvalidPath, op, p, errors.New("trailing slash"))
	}
	parts := strings.Split(p, "/")
	if len(parts) > MaxPathDepth {
		return nil, fail(CodeInvalidPath, op, p, errors.New("path too deep"))
	}
	for _, c := range parts {
		switch {
		case c == "" || c == "." || c == "..":
			return nil, fail(CodeInvalidPath, op, p, errors.New(`empty, "." or ".." component`))
		case len(c) > maxNameLen:
			return nil, fail(CodeInvalidPath, op, p, errors.New("component too long"))
		case reservedName(c):
			return nil, fail(CodeReserved, op, p, nil)
		}
	}
	return parts, nil
}
