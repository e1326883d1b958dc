//go:build race

package tokenizer

// raceEnabled: the race detector slows encoding tenfold; the longest
// measurements are left out under it.
const raceEnabled = true
