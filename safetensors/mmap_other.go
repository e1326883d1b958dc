//go:build !unix

package safetensors

import (
	"errors"
	"os"
)

// mapFile is unavailable here; Open falls back to reading the file.
func mapFile(fh *os.File, size int64) ([]byte, func() error, error) {
	return nil, nil, errors.New("mmap not supported")
}
