package loadprogress

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

func TestLine(t *testing.T) {
	for _, tc := range []struct {
		done, total int64
		rate, left  float64
		want        string
	}{
		{0, 8 << 30, 0, -1, "w: 0 B / 8.0 GiB (0%), 0 B/s"},
		{3 << 30, 8 << 30, 2.5 * (1 << 30), 2, "w: 3.0 GiB / 8.0 GiB (37%), 2.5 GiB/s, 2 s left"},
		{8 << 30, 8 << 30, 1 << 20, 0, "w: 8.0 GiB / 8.0 GiB (100%), 1.0 MiB/s, 0 s left"},
		{512, 1000, 10, 48.8, "w: 512 B / 1000 B (51%), 10 B/s, 49 s left"},
	} {
		if got := Line("w", tc.done, tc.total, tc.rate, tc.left); got != tc.want {
			t.Errorf("Line(%d, %d) = %q, want %q", tc.done, tc.total, got, tc.want)
		}
	}
}

func TestReporterDraws(t *testing.T) {
	var buf bytes.Buffer
	r := New("Loading", &buf, nil)
	r.Update(1, 4)
	r.Update(2, 4) // within the interval: not drawn
	r.Update(4, 4) // the end is always drawn
	r.Done(4, 4)
	out := buf.String()
	if got := strings.Count(out, "\r"); got != 3 {
		t.Errorf("%d redraws in %q, want 3", got, out)
	}
	last := out[strings.LastIndex(out, "\r")+1:]
	if !strings.Contains(last, "4 B / 4 B (100%)") || !strings.HasSuffix(last, "\n") {
		t.Errorf("last line %q does not end at 100%% with a newline", last)
	}
}

type countHandler struct {
	n     *int
	attrs map[string]bool
}

func (h countHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h countHandler) Handle(_ context.Context, r slog.Record) error {
	*h.n++
	r.Attrs(func(a slog.Attr) bool { h.attrs[a.Key] = true; return true })
	return nil
}
func (h countHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h countHandler) WithGroup(string) slog.Handler      { return h }

func TestReporterLogs(t *testing.T) {
	n := 0
	h := countHandler{n: &n, attrs: map[string]bool{}}
	r := New("kev: loading", nil, slog.New(h))
	for i := range int64(100) {
		r.Update(i, 100)
	}
	r.Update(100, 100)
	r.Done(100, 100)
	if n != 2 {
		t.Errorf("%d log events, want 2 (the first and the last)", n)
	}
	for _, k := range []string{"bytes", "total_bytes", "bytes_per_s", "seconds_left"} {
		if !h.attrs[k] {
			t.Errorf("no %s attribute", k)
		}
	}
	var nilR *Reporter
	nilR.Update(1, 2)
	nilR.Done(1, 2)
}
