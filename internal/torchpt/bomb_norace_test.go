//go:build !race

package torchpt

// bombBytes is the zip bomb the tests build: 1 GiB of zeros.
const bombBytes = 1 << 30
