package kev_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/kevgo/kev"
	"github.com/kevgo/kev/kevtest"
	"github.com/kevgo/kev/server"
)

// TestClientAgainstServer asks the handler of kev serve over loopback through a Client and checks that its
// answers and usage equal the predictor's own, that a request the server refuses is the *ValidationError the
// predictor returns, and that a wrong key is an *HTTPError 401.
func TestClientAgainstServer(t *testing.T) {
	p := kevtest.NewPredictor(t, kev.Options{})
	srv := httptest.NewServer(server.New(p, server.Options{APIKey: "secret", Logger: slog.New(slog.DiscardHandler)}))
	defer srv.Close()
	ctx := context.Background()
	var remote kev.Asker = kev.NewClient(srv.URL, "secret")

	questions := []kev.QuestionEntry{
		kev.Noul("billing", "Is the customer asking about a charge?"),
		kev.Choice("department", "Which team should handle this?",
			kev.Opt("returns", "Exchanges, refunds"), kev.Opt("shipping", "Delivery"), kev.Opt("billing", "Charges")),
		kev.Score("urgency", "How urgent is this?", "can wait", "this week", "today"),
	}
	state := map[string]any{"subject": "Charged twice", "body": "My shoes came in the wrong size and I was charged twice."}
	for _, req := range []*kev.Request{
		kev.NewRequest("My running shoes arrived in the wrong size.", questions...),
		{Model: "jev-latest", State: mustValue(t, state), Questions: questions[1:]},
	} {
		want, err := p.Do(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		got, err := remote.Do(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		if got.Model != want.Model || !reflect.DeepEqual(got.Answers, want.Answers) || !reflect.DeepEqual(got.Usage, want.Usage) {
			t.Errorf("over HTTP:\n%v\nin process:\n%v", got, want)
		}
	}
	answers, err := remote.Ask(ctx, "I was charged twice.", questions[0])
	if a, ok := kev.Lookup(answers, "billing"); err != nil || !ok || a.Type != kev.TypeNoul {
		t.Errorf("Ask: %v %v", answers, err)
	}

	bad := kev.NewRequest("x", kev.Choice("department", "Which team?"))
	_, want := p.Do(ctx, bad)
	_, got := remote.Do(ctx, bad)
	// The server sends Kev's pydantic detail list, the predictor its own summary: both *ValidationError.
	var wv, gv *kev.ValidationError
	if !errors.As(want, &wv) || !errors.As(got, &gv) || !strings.Contains(got.Error(), "criteria must have 1..255 options") {
		t.Errorf("invalid request: over HTTP %v, in process %v", got, want)
	}

	_, err = kev.NewClient(srv.URL, "wrong").Do(ctx, bad)
	var he *kev.HTTPError
	if !errors.As(err, &he) || he.StatusCode != http.StatusUnauthorized || he.Detail == "" {
		t.Errorf("wrong key: %v, want an *HTTPError 401 with the server's detail", err)
	}
}

func mustValue(t *testing.T, x any) kev.Value {
	t.Helper()
	v, err := kev.ValueOf(x)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
