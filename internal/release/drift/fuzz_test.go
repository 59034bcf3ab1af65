package drift

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func FuzzParseReferences(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.*"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		data, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte("version: 1\nvariables: [{name: a, quantiles: [1, 1]}, {name: b, kind: categorical, categories: ['1'], proportions: [0]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		refs, err := ParseReferences(data)
		if err != nil {
			return // rejecting input is fine; panicking or hanging is not
		}
		// Whatever parses must compile for a monitor and survive a round trip.
		for _, r := range refs {
			if _, err := r.compile(r.Categories); err != nil {
				t.Fatalf("parsed reference does not compile: %v", err)
			}
		}
		out, err := MarshalReferences(refs)
		if err != nil {
			t.Fatalf("marshal parsed references: %v", err)
		}
		again, err := ParseReferences(out)
		if err != nil {
			t.Fatalf("parse marshalled references: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(again, refs) {
			t.Fatalf("round trip\n%+v\nwant\n%+v", again, refs)
		}
	})
}
