package cors

import (
	"strings"
	"testing"

	"github.com/iop-dev/iop/internal/h1"
)

// FuzzHeaderList: a preflight's Access-Control-Request-Headers comes from
// any page. What HeaderList allows back is only lower-case header names
// joined by ", ", never a byte that could end or split a header, and it
// refuses exactly the lists holding something else.
func FuzzHeaderList(f *testing.F) {
	for _, s := range []string{"", "authorization, content-type", "Authorization,X-Stainless-OS,,", " x-a ,\tx-b", "x evil", "a\r\nset-cookie: x", "ä", strings.Repeat("x-a,", 1100)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		list, ok := HeaderList([]string{in})
		valid := len(in) <= maxHeaderList
		for name := range strings.SplitSeq(in, ",") {
			if name = strings.Trim(name, " \t"); name != "" && !h1.IsToken(name) {
				valid = false
			}
		}
		if ok != valid {
			t.Fatalf("%q: ok %v, want %v", in, ok, valid)
		}
		if !ok {
			if list != "" {
				t.Fatalf("%q: refused but gave %q", in, list)
			}
			return
		}
		if list == "" {
			return
		}
		for name := range strings.SplitSeq(list, ", ") {
			if !h1.IsToken(name) || name != strings.ToLower(name) {
				t.Fatalf("%q: gave %q, with %q", in, list, name)
			}
		}
	})
}
