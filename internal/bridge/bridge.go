// Package bridge lets the HTTP server and the kev command reach a kev.Predictor at the protocol level (System One
// requests as the server decodes them, the model card, the tokenizer, device memory) without package kev
// exporting those methods. Package kev fills in Predictor when it is initialised.
package bridge

import (
	"context"

	"github.com/kevgo/kev/internal/systemone"
)

// Model is a loaded predictor at the protocol level. Every method is safe for concurrent use.
type Model interface {
	// Do answers a request as kev.Predictor.Do does, with the protocol's types and typed errors.
	Do(ctx context.Context, req *systemone.Request) (*systemone.Response, error)
	// Probabilities answers as Do does and returns the model's unrounded probabilities per question and option.
	Probabilities(ctx context.Context, req *systemone.Request) ([][]float32, error)
	// Card is the model card of GET /v1/models at this moment.
	Card() systemone.ModelCard
	// Tokenizer is the base model's tokenizer, the one requests are encoded with.
	Tokenizer() systemone.Tokenizer
	// DeviceMemory reports the device memory the backend holds and the part of it kept for reuse; ok is false for
	// a backend that does not report it (the CPU's).
	DeviceMemory() (held, free int64, ok bool)
	// OnBatch makes f receive the size of every batch the model runs from now on (nil: none). One receiver at a
	// time; f runs on a replica's model goroutine (on several at once when the model has several replicas) and must
	// not block.
	OnBatch(f func(requests int))
}

// Predictor returns the protocol-level model of p, which must be a *kev.Predictor. It is nil until package kev is
// initialised, which importing it does.
var Predictor func(p any) Model
