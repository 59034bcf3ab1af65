package config

import (
	"strings"
	"testing"
	"time"
)

func TestAliasBombIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i < 12; i++ {
		b.WriteString("a" + string(rune('0'+i%10)) + string(rune('a'+i)) + ": &a" + string(rune('a'+i)) + " [")
		prev := "a0"
		if i > 1 {
			prev = "a" + string(rune('a'+i-1))
		}
		for j := range 10 {
			if j > 0 {
				b.WriteString(", ")
			}
			b.WriteString("*" + prev)
		}
		b.WriteString("]\n")
	}
	b.WriteString("gateway:\n  backends: [{name: *al, kind: in_process}]\n")
	start := time.Now()
	_, err := Parse("bomb.yaml", []byte(b.String()), nil)
	if err == nil {
		t.Fatal("alias bomb accepted")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("alias bomb took %v", d)
	}
}

func TestProblemCountIsBounded(t *testing.T) {
	var b strings.Builder
	b.WriteString("gateway:\n  services:\n")
	for range 500 {
		b.WriteString("    - {nam: x}\n")
	}
	_, err := Parse("many.yaml", []byte(b.String()), nil)
	if err == nil {
		t.Fatal("typos accepted")
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != maxProblems {
		t.Fatalf("reported %d problems, want %d", n, maxProblems)
	}
}
