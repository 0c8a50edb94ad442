package workspace

import "errors"

// Code is a closed set of failure classes; each maps to one wire value.
type Code string

// Failure codes.
const (
	CodeInvalidPath     Code = "invalid_path"     // the path text breaks a rule
	CodeReserved        Code = "reserved"         // .iop or a temp name
	CodeLink            Code = "link"             // a symlink anywhere on the path
	CodeCrossesMount    Code = "crosses_mount"    // another file system or mount
	CodeNotRegular      Code = "not_regular"      // not a regular file (or directory where one is needed)
	CodeHardLinked      Code = "hard_linked"      // a file with more than one link
	CodeNotFound        Code = "not_found"        // the entry does not exist
	CodeExists          Code = "exists"           // create-only onto an existing entry
	CodeNotEmpty        Code = "not_empty"        // delete of a non-empty directory
	CodeTooLarge        Code = "too_large"        // beyond a byte limit
	CodeDenied          Code = "denied"           // the operation or command is not granted
	CodeBadArgument     Code = "bad_argument"     // a command argument breaks its placeholder type
	CodeRootChanged     Code = "root_changed"     // the root was renamed or replaced after open
	CodeUnsupportedHost Code = "unsupported_host" // a platform this package does not run on
	CodeClosed          Code = "closed"           // the session was cleaned up
	CodeIO              Code = "io"               // an operating-system failure
)

// Error is a refused or failed workspace operation. Path is the request's
// relative path (never an absolute host path).
type Error struct {
	Code Code
	Op   string
	Path string
	Err  error
}

func (e *Error) Error() string {
	s := "workspace: " + e.Op
	if e.Path != "" {
		s += " " + e.Path
	}
	s += ": " + string(e.Code)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// Is matches another *Error with the same Code, so errors.Is(err,
// &workspace.Error{Code: workspace.CodeLink}) works.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Code == e.Code && t.Op == "" && t.Path == ""
}

// CodeOf returns the code of a workspace error, or "" for nil and
// CodeIO for any other error.
func CodeOf(err error) Code {
	if err == nil {
		return ""
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return CodeIO
}

func fail(code Code, op, path string, err error) *Error {
	return &Error{Code: code, Op: op, Path: path, Err: err}
}
