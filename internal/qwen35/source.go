package qwen35

// Source supplies a model's tensors one at a time, for loads that stream the weights to the engine instead of
// holding them all on the host: the engine fetches a tensor, copies it into its own storage and releases it, and
// the source may then drop its host copy. Implementations are safe for concurrent use.
type Source interface {
	// Fetch returns the tensor with the canonical name, building it or waiting for it when needed; ok is false
	// when the model has no such tensor. A tensor fetched twice may be built twice.
	Fetch(name string) (t *Tensor, ok bool, err error)
	// Release says the engine no longer reads the named tensor's host data.
	Release(name string)
}

// Release tells w's Source (if any) that the engine holds its own copy of the named tensors; Weights without a
// Source ignore it.
func (w *Weights) Release(names ...string) {
	if w.Source == nil {
		return
	}
	for _, n := range names {
		w.Source.Release(n)
	}
}
