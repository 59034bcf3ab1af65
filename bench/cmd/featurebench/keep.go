package main

import (
	"os"
	"strings"
)

// keptHeading starts the sections of the report that other benchmarks
// write (go test -bench results pasted by hand): a rerun of featurebench
// keeps them, after its own.
const keptHeading = "\n## On-demand features"

// keptSections returns the kept sections of the report at path, or "".
func keptSections(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.Index(s, keptHeading)
	if i < 0 {
		return ""
	}
	return s[i:]
}
