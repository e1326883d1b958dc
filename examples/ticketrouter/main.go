// Command ticketrouter is a small HTTP service that routes customer-support tickets with a Kev model embedded in
// the process: POST a ticket to /tickets and it answers the queue it belongs in, why, and the calibrated
// probabilities behind the decision.
//
//	go run ./examples/ticketrouter -checkpoint testdata/golden/tiny-a/kev -base testdata/golden/tiny-a/base
//	curl -s localhost:8080/tickets -H 'Content-Type: application/json' \
//	     -d '{"subject": "Charged twice", "body": "I see two charges for order 1042.", "customer": {"plan": "pro"}}'
//
// The model is loaded once; every request calls Predictor.Ask, which batches concurrent requests into one pass.
// See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kevgo/kev"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "ticketrouter:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("ticketrouter", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8080", "listen address")
	checkpoint := fs.String("checkpoint", "", "Kev checkpoint: a directory or a hub name such as jaredpalmer/kev-4b (required)")
	base := fs.String("base", "", "base model directory or hub name (default: the checkpoint's own)")
	device := fs.String("device", "cpu", "where the model runs: cpu, or cuda in a binary built with -tags cuda")
	escalateAt := fs.Float64("escalate-at", 0.5, "P(needs a person now) at which a ticket goes to the urgent queue")
	minDept := fs.Float64("min-department", 0.4, "the likeliest department's probability below which a ticket goes to triage")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if *checkpoint == "" {
		return errors.New("-checkpoint is required: a Kev checkpoint directory, or from the repository root " +
			"-checkpoint testdata/golden/tiny-a/kev -base testdata/golden/tiny-a/base (a small random test model)")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	p, err := kev.Load(ctx, *checkpoint, kev.Options{Base: *base, Device: kev.Device(*device)})
	if err != nil {
		return err
	}
	defer p.Close()

	router := &Router{Model: p, EscalateAt: *escalateAt, MinDepartment: *minDept, Log: log}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: router, ReadHeaderTimeout: 10 * time.Second}
	log.Info("ticketrouter: listening", "url", "http://"+ln.Addr().String(), "checkpoint", *checkpoint)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Finish the tickets being routed, then stop.
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	log.Info("ticketrouter: stopped")
	return nil
}
