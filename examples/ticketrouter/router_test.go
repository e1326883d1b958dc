package main

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kevgo/kev"
)

// tinyA is a directory of the repository's small random test checkpoint.
func tinyA(dir string) string { return filepath.Join("..", "..", "testdata", "golden", "tiny-a", dir) }

func loadTiny(t *testing.T) *kev.Predictor {
	t.Helper()
	p, err := kev.Load(context.Background(), tinyA("kev"), kev.Options{Base: tinyA("base")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

var tickets = []string{
	`{"subject": "Charged twice", "body": "I see two charges for order 1042.", "customer": {"plan": "pro", "orders": 17}}`,
	`{"subject": "Where is my parcel?", "body": "Tracking has not moved in a week."}`,
	`{"body": "The app logs me out every time I open my orders. I have a lawyer."}`,
}

func post(t *testing.T, url, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestRoute serves the router on the test checkpoint and checks each ticket's route against the model's own
// answers to the same structured state, under thresholds that force each kind of queue.
func TestRoute(t *testing.T) {
	p := loadTiny(t)
	for _, c := range []struct {
		name               string
		escalateAt, minDep float64
		queue              func(r Route) string
	}{
		{"department", 1.01, 0, func(r Route) string { return r.Department }},
		{"urgent", 0, 0, func(Route) string { return UrgentQueue }},
		{"triage", 1.01, 1.01, func(Route) string { return TriageQueue }},
		{"defaults", 0.5, 0.4, func(r Route) string {
			switch {
			case r.PEscalate >= 0.5:
				return UrgentQueue
			case r.PDept < 0.4:
				return TriageQueue
			}
			return r.Department
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := httptest.NewServer(&Router{Model: p, EscalateAt: c.escalateAt, MinDepartment: c.minDep})
			defer srv.Close()
			for _, body := range tickets {
				code, b := post(t, srv.URL+"/tickets", body)
				if code != http.StatusOK {
					t.Fatalf("%d %s", code, b)
				}
				var got Route
				if err := json.Unmarshal(b, &got); err != nil {
					t.Fatal(err)
				}
				want := expectRoute(t, p, body)
				if got.Department != want.Department || got.PDept != want.PDept || got.PEscalate != want.PEscalate ||
					got.Urgency != want.Urgency || len(got.Depts) != len(departments) {
					t.Errorf("%s: got %+v, the model answers %+v", body, got, want)
				}
				sum := 0.0
				for _, p := range got.Depts {
					sum += p
				}
				if math.Abs(sum-1) > 3e-4 {
					t.Errorf("department probabilities sum to %v", sum)
				}
				if q := c.queue(got); got.Queue != q || got.Reason == "" {
					t.Errorf("%s: queue %q (%s), want %q", body, got.Queue, got.Reason, q)
				}
			}
		})
	}
}

// expectRoute asks the model directly about the ticket's state, built as the router documents it.
func expectRoute(t *testing.T, p *kev.Predictor, body string) Route {
	var tk Ticket
	json.Unmarshal([]byte(body), &tk)
	state := kev.Object{{Key: "subject", Value: tk.Subject}, {Key: "message", Value: tk.Body}}
	if tk.Customer != nil {
		state = append(state, kev.Member{Key: "customer", Value: tk.Customer})
	}
	answers, err := p.Ask(context.Background(), state, questions...)
	if err != nil {
		t.Fatal(err)
	}
	r := Route{Department: answers[0].Answer.Choice, PEscalate: answers[1].Answer.Noul, Urgency: answers[2].Answer.Score}
	for _, pr := range answers[0].Answer.Probabilities {
		if pr.Key == r.Department {
			r.PDept = pr.P
		}
	}
	return r
}

func TestBadRequests(t *testing.T) {
	srv := httptest.NewServer(&Router{Model: loadTiny(t), EscalateAt: 0.5, MinDepartment: 0.4})
	defer srv.Close()
	for _, c := range []struct {
		method, path, body string
		code               int
		msg                string
	}{
		{"POST", "/tickets", `{"subject": "x"`, 400, "the body is not a ticket"},
		{"POST", "/tickets", `{"subject": "x", "priority": 1}`, 400, `unknown field "priority"`},
		{"POST", "/tickets", `{"subject": " ", "body": ""}`, 400, "neither a subject nor a body"},
		{"GET", "/tickets", "", 405, "POST a ticket"},
		{"GET", "/other", "", 404, "no such endpoint"},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Error string }
		if json.Unmarshal(b, &e); resp.StatusCode != c.code || !strings.Contains(e.Error, c.msg) {
			t.Errorf("%s %s %s: %d %s", c.method, c.path, c.body, resp.StatusCode, b)
		}
	}
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil || resp.StatusCode != 200 {
		t.Errorf("healthz: %v %v", resp, err)
	}
}

// TestConcurrentTickets routes tickets from several clients at once (the predictor batches them): each gets the
// route it gets alone.
func TestConcurrentTickets(t *testing.T) {
	p := loadTiny(t)
	srv := httptest.NewServer(&Router{Model: p, EscalateAt: 1.01, MinDepartment: 0})
	defer srv.Close()
	want := make([]Route, len(tickets))
	for i, b := range tickets {
		want[i] = expectRoute(t, p, b)
	}
	errs := make(chan string, 3*len(tickets))
	for range 3 {
		for i, body := range tickets {
			go func() {
				resp, err := http.Post(srv.URL+"/tickets", "application/json", strings.NewReader(body))
				if err != nil {
					errs <- err.Error()
					return
				}
				defer resp.Body.Close()
				var got Route
				json.NewDecoder(resp.Body).Decode(&got)
				if got.Queue != want[i].Department || got.PEscalate != want[i].PEscalate {
					errs <- "ticket " + body + ": " + got.Reason
					return
				}
				errs <- ""
			}()
		}
	}
	for range 3 * len(tickets) {
		if e := <-errs; e != "" {
			t.Error(e)
		}
	}
}

// TestProgram builds the service as a user does, runs it on the test checkpoint, routes a ticket and stops it
// with SIGTERM.
func TestProgram(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the program: runs without -short")
	}
	bin := filepath.Join(t.TempDir(), "ticketrouter")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0", "-checkpoint", tinyA("kev"), "-base", tinyA("base"))
	logs, _ := cmd.StderrPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	urlRE := regexp.MustCompile(`ticketrouter: listening" url=(http://\S+)`)
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(logs)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var url string
	var seen []string
	deadline := time.After(time.Minute)
	for url == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("exited before listening:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if m := urlRE.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
		case <-deadline:
			t.Fatalf("not listening after a minute:\n%s", strings.Join(seen, "\n"))
		}
	}
	code, b := post(t, url+"/tickets", tickets[0])
	var r Route
	if err := json.Unmarshal(b, &r); code != 200 || err != nil ||
		!slices.Contains([]string{"billing", "shipping", "returns", "technical", "sales", UrgentQueue, TriageQueue}, r.Queue) {
		t.Errorf("%d %s", code, b)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() {
		for l := range lines {
			seen = append(seen, l)
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil || !strings.Contains(strings.Join(seen, "\n"), "ticketrouter: stopped") {
			t.Errorf("after SIGTERM: %v\n%s", err, strings.Join(seen, "\n"))
		}
	case <-time.After(time.Minute):
		t.Fatal("did not stop at SIGTERM")
	}
}
