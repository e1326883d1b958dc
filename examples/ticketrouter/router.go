package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"

	"github.com/kevgo/kev"
)

// Ticket is what POST /tickets takes: a support ticket as the help desk sends it.
type Ticket struct {
	Subject  string         `json:"subject"`
	Body     string         `json:"body"`
	Customer map[string]any `json:"customer,omitempty"` // anything known about the sender: plan, country, ...
}

// Route is what POST /tickets answers: the queue the ticket goes to, why, and the model's answers behind it.
type Route struct {
	Queue      string             `json:"queue"`      // a department, UrgentQueue or TriageQueue
	Reason     string             `json:"reason"`     // one line for the agent who picks the ticket up
	Department string             `json:"department"` // the most likely department
	PDept      float64            `json:"p_department"`
	Depts      map[string]float64 `json:"departments"` // every department's probability
	PEscalate  float64            `json:"p_escalate"`  // P(the ticket needs a person now)
	Urgency    float64            `json:"urgency"`     // expected level, 0 (can wait) to 3 (right now)
}

// The queues besides the departments.
const (
	UrgentQueue = "urgent" // a person looks at it now
	TriageQueue = "triage" // the model is unsure of the department: a person sorts it
)

// departments are the queues a ticket can be routed to, with the description the model reads.
var departments = []kev.Option{
	kev.Opt("billing", "Charges, refunds of payments, invoices, subscriptions"),
	kev.Opt("shipping", "Delivery status, delays, lost or damaged packages"),
	kev.Opt("returns", "Exchanges, returns, wrong items or sizes"),
	kev.Opt("technical", "The website or app does not work, login problems, bugs"),
	kev.Opt("sales", "Questions before buying: products, prices, availability"),
}

// questions are what the router asks about every ticket.
var questions = []kev.QuestionEntry{
	kev.Choice("department", "Which team should handle this ticket?", departments...),
	kev.NoulWith("escalate", "Does this ticket need a person to act right now?",
		"Threats, safety, legal action, an outage, or a customer who has waited too long",
		"It can wait in the normal queue"),
	kev.Score("urgency", "How urgent is this ticket?", "Can wait", "This week", "Today", "Right now"),
}

// Asker answers questions about a state: a *kev.Predictor.
type Asker interface {
	Ask(ctx context.Context, state any, questions ...kev.QuestionEntry) ([]kev.AnswerEntry, error)
}

// Router routes tickets: POST /tickets with a Ticket answers a Route; GET /healthz answers 200.
type Router struct {
	Model Asker

	// EscalateAt sends a ticket to UrgentQueue when P(escalate) reaches it.
	EscalateAt float64
	// MinDepartment sends a ticket to TriageQueue when the likeliest department's probability is below it.
	MinDepartment float64

	Log *slog.Logger // nil: slog.Default()
}

// maxTicketBytes bounds a request body.
const maxTicketBytes = 1 << 20

// ServeHTTP serves the router's two endpoints.
func (rt *Router) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "ok\n")
	case "/tickets":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeError(w, http.StatusMethodNotAllowed, "POST a ticket: {\"subject\": ..., \"body\": ..., \"customer\": {...}}")
			return
		}
		rt.route(w, r)
	default:
		writeError(w, http.StatusNotFound, "no such endpoint: POST /tickets, GET /healthz")
	}
}

func (rt *Router) route(w http.ResponseWriter, r *http.Request) {
	var t Ticket
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxTicketBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		writeError(w, http.StatusBadRequest, "the body is not a ticket: "+err.Error())
		return
	}
	if strings.TrimSpace(t.Subject) == "" && strings.TrimSpace(t.Body) == "" {
		writeError(w, http.StatusBadRequest, "the ticket has neither a subject nor a body")
		return
	}
	route, err := rt.Route(r.Context(), t)
	if err != nil {
		status := http.StatusInternalServerError
		var ve *kev.ValidationError
		switch {
		case errors.As(err, &ve):
			status = http.StatusUnprocessableEntity
		case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
			status = http.StatusServiceUnavailable
		}
		rt.log().Error("routing failed", "err", err)
		writeError(w, status, err.Error())
		return
	}
	rt.log().Info("routed", "queue", route.Queue, "reason", route.Reason)
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(route)
}

// Route asks the model about the ticket and decides its queue.
func (rt *Router) Route(ctx context.Context, t Ticket) (Route, error) {
	// The state is structured: Kev renders it as labelled text ("subject: ...", "message: ...", "customer:" and its
	// fields indented), in the order given here.
	state := kev.Object{{Key: "subject", Value: t.Subject}, {Key: "message", Value: t.Body}}
	if len(t.Customer) > 0 {
		state = append(state, kev.Member{Key: "customer", Value: t.Customer})
	}
	answers, err := rt.Model.Ask(ctx, state, questions...)
	if err != nil {
		return Route{}, err
	}
	return rt.decide(answers)
}

// decide turns the answers into a queue.
func (rt *Router) decide(answers []kev.AnswerEntry) (Route, error) {
	byID := map[string]kev.Answer{}
	for _, a := range answers {
		byID[a.ID] = a.Answer
	}
	dept, esc, urg := byID["department"], byID["escalate"], byID["urgency"]
	if dept.Type != kev.TypeChoice || esc.Type != kev.TypeNoul || urg.Type != kev.TypeScore {
		return Route{}, fmt.Errorf("the model answered %d questions without the expected ones", len(answers))
	}
	r := Route{Department: dept.Choice, PEscalate: esc.Noul, Urgency: urg.Score, Depts: map[string]float64{}}
	for _, p := range dept.Probabilities {
		r.Depts[p.Key] = p.P
	}
	r.PDept = r.Depts[dept.Choice]
	if math.IsNaN(r.PDept) || math.IsNaN(r.PEscalate) {
		return Route{}, errors.New("the model answered NaN")
	}
	switch {
	case r.PEscalate >= rt.EscalateAt:
		r.Queue = UrgentQueue
		r.Reason = fmt.Sprintf("needs a person now (p=%.2f); otherwise %s (p=%.2f)", r.PEscalate, r.Department, r.PDept)
	case r.PDept < rt.MinDepartment:
		r.Queue = TriageQueue
		r.Reason = fmt.Sprintf("unsure of the department: %s at p=%.2f is below %.2f", r.Department, r.PDept, rt.MinDepartment)
	default:
		r.Queue = r.Department
		r.Reason = fmt.Sprintf("%s (p=%.2f), urgency %.1f of 3", r.Department, r.PDept, r.Urgency)
	}
	return r, nil
}

func (rt *Router) log() *slog.Logger {
	if rt.Log != nil {
		return rt.Log
	}
	return slog.Default()
}

// writeError answers {"error": msg} with the status.
func writeError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(map[string]string{"error": msg})
}
