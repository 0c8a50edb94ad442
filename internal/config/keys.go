package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// UnknownKeyError is a key a configuration file's section does not have:
// a misspelling, or a setting of another version or file. The file is
// refused whole, so nothing it meant to set is silently left at its
// default.
type UnknownKeyError struct {
	Line int
	// Path is the section the key sits in, such as "limits" or
	// "nodes[0].providers[1]"; empty at the top level.
	Path string
	// Key is the key as written; empty when it sits where a secret's
	// source is named (a secret mistyped as a key is never repeated).
	Key string
	// Known are the keys the section has, sorted; Suggest is the one the
	// key most likely meant, if any is close.
	Known   []string
	Suggest string
}

func (e *UnknownKeyError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "line %d: ", e.Line)
	in := "at the top level"
	if e.Path != "" {
		in = "in " + e.Path
	}
	if e.Key == "" {
		fmt.Fprintf(&b, "unknown key %s", in)
	} else {
		fmt.Fprintf(&b, "unknown key %q %s", e.Key, in)
	}
	if e.Suggest != "" {
		fmt.Fprintf(&b, "; did you mean %q?", e.Suggest)
	} else {
		fmt.Fprintf(&b, " (it has %s)", strings.Join(e.Known, ", "))
	}
	return b.String()
}

// maxShownKey bounds a key repeated in an error: a value pasted where a
// key belongs can be long, and may be something that should not be
// printed in full.
const maxShownKey = 48

var secretType = reflect.TypeFor[Secret]()

// unknownKeys walks a decoded YAML document beside the Go type it
// decodes into and returns every mapping key the type has no field for,
// in document order. Values are never looked at, only keys. Aliases are
// not followed (an anchor may hold itself, or expand exponentially): the
// keys under one are left to yaml.v3's own check, which guards both.
func unknownKeys(n *yaml.Node, t reflect.Type, path string, out []*UnknownKeyError) []*UnknownKeyError {
	if n.Kind == yaml.DocumentNode {
		if len(n.Content) != 1 {
			return out
		}
		n = n.Content[0]
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch {
	case t.Kind() == reflect.Struct && n.Kind == yaml.MappingNode:
		fields := yamlFields(t)
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i], n.Content[i+1]
			ft, ok := fields[k.Value]
			if !ok {
				if k.Value == "<<" { // a merge key: its keys belong here
					out = unknownKeys(v, t, path, out)
					continue
				}
				out = append(out, unknown(k, t, path, fields))
				continue
			}
			out = unknownKeys(v, ft, join(path, k.Value), out)
		}
	case (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) && n.Kind == yaml.SequenceNode:
		for i, e := range n.Content {
			out = unknownKeys(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i), out)
		}
	case t.Kind() == reflect.Map && n.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			out = unknownKeys(n.Content[i+1], t.Elem(), join(path, n.Content[i].Value), out)
		}
	}
	return out
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func unknown(k *yaml.Node, t reflect.Type, path string, fields map[string]reflect.Type) *UnknownKeyError {
	known := make([]string, 0, len(fields))
	for name := range fields {
		known = append(known, name)
	}
	slices.Sort(known)
	e := &UnknownKeyError{Line: k.Line, Path: path, Known: known}
	if t != secretType {
		e.Key = k.Value
		if len(e.Key) > maxShownKey {
			e.Key = e.Key[:maxShownKey] + "..."
		}
		e.Suggest = closest(k.Value, known)
	}
	return e
}

// yamlFields maps the keys a struct decodes (yaml.v3's rules: the tag's
// name, else the lower-cased field name; inline structs merged; "-" and
// unexported fields skipped) to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() && !f.Anonymous {
			continue
		}
		tag := f.Tag.Get("yaml")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if slices.Contains(strings.Split(opts, ","), "inline") {
			ft := f.Type
			if ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				for k, v := range yamlFields(ft) {
					out[k] = v
				}
			}
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

// closest is the known key nearest to key by edit distance, if it is
// near enough to be a misspelling of it (at most a third of its length).
func closest(key string, known []string) string {
	best, bestD := "", len(key)/3+1
	for _, k := range known {
		if d := editDistance(strings.ToLower(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
