package loadtest

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteTable writes the report for people: one row per level, then the protocol checks and the answers check.
func (r *Report) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "clients\trequests\terrors\treq/s\tp50 ms\tp99 ms\tserver p50 ms\tmodel p50 ms\t")
	for _, l := range r.Levels {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%.1f\t%.1f\t%.1f\t%s\t%s\t\n", l.Concurrency, l.Requests, l.Errors, l.RPS,
			l.P50MS, l.P99MS, orDash(l.ProcessP50), orDash(l.ModelP50))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var b strings.Builder
	for _, l := range r.Levels {
		if l.Errors > 0 {
			fmt.Fprintf(&b, "concurrency %d: %d of %d requests failed; the first: %s\n", l.Concurrency, l.Errors,
				l.Requests, l.FirstError)
		}
	}
	p := r.Protocol
	b.WriteString("protocol: ")
	if p.Unauthorized != 0 {
		fmt.Fprintf(&b, "no key → %d %s; ", p.Unauthorized, mark(p.Unauthorized == 401))
	} else {
		b.WriteString("no key → not checked (no -key); ")
	}
	fmt.Fprintf(&b, "invalid body → %d %s; request ids %s\n", p.Invalid, mark(p.Invalid == 422), mark(p.RequestID))
	if r.AnswersEqual {
		b.WriteString("answers: the same for every request with the same body\n")
	} else {
		fmt.Fprintf(&b, "answers: %d responses differ from the first answer to the same body\n", r.Mismatches)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Problems lists what went wrong: failed requests, failed protocol checks, answers that differ for one body.
// An empty list means the server passed.
func (r *Report) Problems() []string {
	var out []string
	for _, l := range r.Levels {
		if l.Errors > 0 {
			out = append(out, fmt.Sprintf("%d of %d requests failed at concurrency %d", l.Errors, l.Requests, l.Concurrency))
		}
	}
	p := r.Protocol
	if p.Unauthorized != 0 && p.Unauthorized != 401 {
		out = append(out, "a request without the key got "+strconv.Itoa(p.Unauthorized)+", want 401")
	}
	if p.Invalid != 422 {
		out = append(out, "an invalid body got "+strconv.Itoa(p.Invalid)+", want 422")
	}
	if !p.RequestID {
		out = append(out, "a response lacked X-Typesafe-Request-Id")
	}
	if !r.AnswersEqual {
		out = append(out, strconv.Itoa(r.Mismatches)+" responses differ from the first answer to the same body")
	}
	return out
}

func mark(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAILED"
}

// orDash prints a latency, or "-" when the server sent none (0).
func orDash(ms float64) string {
	if ms == 0 {
		return "-"
	}
	return strconv.FormatFloat(ms, 'f', 1, 64)
}
