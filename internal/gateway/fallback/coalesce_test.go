package fallback

import (
	"errors"
	"testing"
)

// A variable read only through ?? may be absent (a feature NOT_FOUND or
// null): the default applies. Read anywhere else too, it is required.
func TestRuleCoalesceAbsentVariable(t *testing.T) {
	vars := map[string]VarType{"base": Float, "delay": Float, "n": Int}
	r, err := CompileRule("base + (delay ?? 0) + (n ?? 2)", vars)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		in   map[string]any
		want float64
	}{
		{map[string]any{"base": 30.0}, 32},
		{map[string]any{"base": 30.0, "delay": nil}, 32},
		{map[string]any{"base": 30.0, "delay": 4.5}, 36.5},
		{map[string]any{"base": 30.0, "delay": 4.5, "n": 1}, 35.5},
	} {
		got, err := r.Eval(c.in)
		if err != nil || got != c.want {
			t.Errorf("Eval(%v) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := r.Eval(map[string]any{"delay": 1.0}); !errors.Is(err, ErrEval) {
		t.Errorf("Eval without base: err %v, want ErrEval (base is not behind ??)", err)
	}
	r, err = CompileRule("(delay ?? 0) + delay", vars)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Eval(map[string]any{}); !errors.Is(err, ErrEval) {
		t.Errorf("delay read outside ?? too: err %v, want ErrEval", err)
	}
}
