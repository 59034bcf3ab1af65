package diff

import "testing"

func FuzzParseSliceKey(f *testing.F) {
	for _, s := range []string{"x-region", "header:X-Region", "feature:route_features__distance_km@2,5,10", "request:a@-1,0.5", "d@", ":", "@,"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseSliceKey(s)
		if err != nil {
			return
		}
		again, err := ParseSliceKey(k.String())
		if err != nil {
			t.Fatalf("ParseSliceKey(%q) = %+v, but its String %q does not parse: %v", s, k, k.String(), err)
		}
		if again.String() != k.String() {
			t.Fatalf("round trip: %q → %q → %q", s, k.String(), again.String())
		}
	})
}
