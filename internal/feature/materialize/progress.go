package materialize

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"time"
)

// progress is a one-line progress display for one view: on a terminal it
// redraws the line in place at most every 200 ms; elsewhere (a log file, a
// pipe) it prints one line a second. A nil *progress does nothing.
type progress struct {
	w        io.Writer
	view     string
	tty      bool
	now      func() time.Time
	interval time.Duration
	start    time.Time
	last     time.Time
}

// progressCheckEvery is how many rows pass between clock reads.
const progressCheckEvery = 256

func newProgress(w io.Writer, view string, now func() time.Time) *progress {
	if w == nil {
		return nil
	}
	p := &progress{w: w, view: view, tty: isTerminal(w), now: now, interval: time.Second}
	if p.tty {
		p.interval = 200 * time.Millisecond
	}
	p.start = now()
	p.last = p.start
	return p
}

// update shows rows read so far, when enough time has passed; it reads
// the clock only every progressCheckEvery rows.
func (p *progress) update(rows int64) {
	if p == nil || rows%progressCheckEvery != 0 {
		return
	}
	t := p.now()
	if t.Sub(p.last) < p.interval {
		return
	}
	p.last = t
	p.print(rows, t, "", false)
}

// done shows the final line, followed by a newline.
func (p *progress) done(rows int64, tail string) {
	if p == nil {
		return
	}
	p.print(rows, p.now(), tail, true)
}

func (p *progress) print(rows int64, t time.Time, tail string, final bool) {
	rate := int64(0)
	if el := t.Sub(p.start).Seconds(); el > 0 {
		rate = int64(float64(rows) / el)
	}
	line := fmt.Sprintf("%s  %s rows  %s rows/s", p.view, commas(rows), commas(rate))
	if tail != "" {
		line += "  " + tail
	}
	switch {
	case p.tty && final:
		fmt.Fprintf(p.w, "\r%s\x1b[K\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// commas formats n with thousands separators: 45210 → "45,210".
func commas(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := false
	if n < 0 {
		neg, s = true, s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3+1)
	if neg {
		out = append(out, '-')
	}
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
