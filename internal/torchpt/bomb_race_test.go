//go:build race

package torchpt

// bombBytes is the zip bomb the tests build: smaller under the race
// detector, which slows deflate tenfold, and still over every limit.
const bombBytes = 128 << 20
