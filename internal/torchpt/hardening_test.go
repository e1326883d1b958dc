package torchpt

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/zip"
)

// rawEntry is an archive member written with whatever headers the test
// chooses: data is the stored or deflated payload as it lies in the file.
type rawEntry struct {
	name     string
	method   uint16
	data     []byte // the payload as written
	declared uint64 // the uncompressed size the header claims
	crc      uint32
}

func makeRawZip(t testing.TB, entries ...rawEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for _, e := range entries {
		w, err := zw.CreateRaw(&zip.FileHeader{Name: e.name, Method: e.method, CRC32: e.crc,
			CompressedSize64: uint64(len(e.data)), UncompressedSize64: e.declared})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// deflateZeros deflates n zero bytes (1 GiB gives about 1 MB in 0.3 s) and
// returns the stream and the CRC-32 of the zeros.
func deflateZeros(t testing.TB, n int64) ([]byte, uint32) {
	t.Helper()
	var buf bytes.Buffer
	w, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		t.Fatal(err)
	}
	h := crc32.NewIEEE()
	if _, err := io.CopyN(io.MultiWriter(w, h), zeroReader{}, n); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), h.Sum32()
}

func deflateBytes(t testing.TB, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, _ := flate.NewWriter(&buf, flate.BestSpeed)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// decodeMeasured runs Decode and reports the bytes it allocated and its time.
func decodeMeasured(data []byte, lim Limits) (any, error, uint64, time.Duration) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	v, err := Decode(bytes.NewReader(data), int64(len(data)), "evil.pt", lim)
	d := time.Since(start)
	runtime.ReadMemStats(&after)
	return v, err, after.TotalAlloc - before.TotalAlloc, d
}

// TestHardeningZipSizes: no declared size is trusted. A 19 KB file declaring a
// 60 GiB data.pkl, zip bombs with honest and lying headers, and entries
// shorter or longer than they say are refused with a typed *Error naming the
// entry, quickly and without allocating what the headers claim.
func TestHardeningZipSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 19<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	gib, gibCRC := deflateZeros(t, 1<<30)
	mib60, mib60CRC := deflateZeros(t, 60<<20)
	good := pk(0x80, 2, "}.")
	goodDeflated := deflateBytes(t, good)
	goodCRC := crc32.ChecksumIEEE(good)
	tests := []struct {
		name   string
		entry  rawEntry
		limit  bool // errors.Is(err, ErrLimit)
		reason string
	}{
		{"60 GiB data.pkl in 19 KB", rawEntry{"archive/data.pkl", zip.Deflate, noise, 60 << 30, 0}, true, "over the 67108864-byte limit"},
		{"bomb, honest header", rawEntry{"archive/data.pkl", zip.Deflate, gib, 1 << 30, gibCRC}, true, "over the 67108864-byte limit"},
		{"bomb, lying header", rawEntry{"archive/data.pkl", zip.Deflate, gib, 1000, gibCRC}, true, "longer than the 1000 bytes it declares"},
		{"bomb under the limit", rawEntry{"archive/data.pkl", zip.Deflate, mib60, 60 << 20, mib60CRC}, true, "zip bomb"},
		{"deflated, short", rawEntry{"archive/data.pkl", zip.Deflate, goodDeflated, 1000, goodCRC}, false, "shorter than the 1000"},
		{"deflated, long", rawEntry{"archive/data.pkl", zip.Deflate, goodDeflated, 2, goodCRC}, true, "longer than the 2 bytes"},
		{"stored, lying", rawEntry{"archive/data.pkl", zip.Store, good, 1 << 20, goodCRC}, false, "stored entry declares 1048576 bytes but occupies 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := makeRawZip(t, tc.entry)
			_, err, alloc, d := decodeMeasured(data, DefaultLimits)
			var te *Error
			if !errors.As(err, &te) || te.File != "evil.pt" || te.Entry != "archive/data.pkl" ||
				!strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v, want an *Error on archive/data.pkl mentioning %q", err, tc.reason)
			}
			if errors.Is(err, ErrLimit) != tc.limit {
				t.Errorf("errors.Is(err, ErrLimit) = %v, want %v", !tc.limit, tc.limit)
			}
			if alloc > 8<<20 || d > 2*time.Second {
				t.Errorf("allocated %d bytes in %v", alloc, d)
			}
			t.Logf("%v (allocated %d KiB in %v)", err, alloc>>10, d)
		})
	}
}

// TestHardeningStorageSizes: a storage entry is bounded by the size the pickle
// declares for it and by the archive's total, whatever its header says.
func TestHardeningStorageSizes(t *testing.T) {
	pkl := tensorPickle(storagePid("FloatStorage", "0", 4), 0, []byte{4}, []byte{1})
	st := floatBytes(1, 2, 3, 4)
	bomb, bombCRC := deflateZeros(t, 1<<30)
	pklEntry := rawEntry{"a/data.pkl", zip.Store, pkl, uint64(len(pkl)), crc32.ChecksumIEEE(pkl)}
	tests := []struct {
		name    string
		storage rawEntry
		lim     Limits
		reason  string
	}{
		{"bomb behind 16 declared bytes", rawEntry{"a/data/0", zip.Deflate, bomb, 16, bombCRC}, DefaultLimits, "longer than the 16 bytes"},
		{"header disagrees with the pickle", rawEntry{"a/data/0", zip.Deflate, bomb, 1 << 30, bombCRC}, DefaultLimits, "needs 16"},
		{"over the archive's total", rawEntry{"a/data/0", zip.Store, st, 16, crc32.ChecksumIEEE(st)}, Limits{MaxTotalBytes: int64(len(pkl)) + 8}, "left of the"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := makeRawZip(t, pklEntry, tc.storage)
			_, err, alloc, _ := decodeMeasured(data, tc.lim)
			var te *Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v, want an *Error mentioning %q", err, tc.reason)
			}
			if alloc > 8<<20 {
				t.Errorf("allocated %d bytes", alloc)
			}
		})
	}
	// The same archive with honest sizes loads.
	data := makeRawZip(t, pklEntry, rawEntry{"a/data/0", zip.Store, st, 16, crc32.ChecksumIEEE(st)})
	if _, err := Decode(bytes.NewReader(data), int64(len(data)), "ok.pt", DefaultLimits); err != nil {
		t.Fatal(err)
	}
}

// TestHardeningPickleLengths: length-prefixed and text opcodes are checked
// against their limits before anything is parsed, and no message echoes more
// than a short quoted prefix of the file's bytes.
func TestHardeningPickleLengths(t *testing.T) {
	digits := strings.Repeat("7", 4_000_000)
	huge := strings.Repeat("x", 4<<20)
	binunicode := func(s string) []byte { return unicode(s) }
	long4 := append([]byte{0x8b, 0, 0, 0x10, 0}, make([]byte, 1<<20)...) // 1 MiB integer
	tests := []struct {
		name   string
		pkl    []byte
		limit  bool
		reason string
	}{
		{"LONG of 4M digits", pk(0x80, 2, "L", digits, "L\n."), true, "longer than 4096 bytes"},
		{"LONG of 2000 digits", pk(0x80, 2, "L", digits[:2000], "L\n."), true, "LONG of 2000 digits, over the 1024-byte limit"},
		{"bad LONG", pk(0x80, 2, "L12x", huge[:100], "\n."), false, `bad LONG "12xxxxx`},
		{"LONG4 of 1 MiB", pk(0x80, 2, long4, "."), true, "LONG4 of 1048576 bytes"},
		{"INT of 4 MB", pk(0x80, 2, "I", huge, "\n."), true, "longer than 4096"},
		{"bad INT", pk(0x80, 2, "I", huge[:4000], "\n."), false, `bad INT "xxxx`},
		{"global of 4 MB", pk(0x80, 4, binunicode(huge), binunicode("x"), 0x93, "."), false, "is not allowed"},
		{"text global", pk(0x80, 2, "cos\n", huge[:3000], "\n."), false, "is not allowed"},
		{"storage key of 4 MB", tensorPickle(storagePid("FloatStorage", huge, 4), 0, []byte{4}, []byte{1}), false, "bad storage key"},
		{"BINUNICODE past the end", pk(0x80, 2, "X", 0xff, 0xff, 0xff, 0x7f, "ab."), false, "runs past"},
		{"BINUNICODE8 past the end", pk(0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, "ab."), false, "runs past"},
		{"BINBYTES8 past the end", pk(0x80, 4, 0x8e, 0, 0, 0, 0, 0, 0, 0, 0x80, "."), false, "runs past"},
		{"long shape", tensorPickle(storagePid("FloatStorage", "0", 4), 0, bytes.Repeat([]byte{1}, 200), []byte{1}), false, "…(200 dims)"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := makeZip(t, entry{"a/data.pkl", tc.pkl}, entry{"a/data/0", floatBytes(1, 2, 3, 4)})
			start := time.Now()
			_, err := Decode(bytes.NewReader(data), int64(len(data)), "evil.pt", DefaultLimits)
			d := time.Since(start)
			var te *Error
			if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %.300v, want an *Error mentioning %q", err, tc.reason)
			}
			if errors.Is(err, ErrLimit) != tc.limit {
				t.Errorf("errors.Is(err, ErrLimit) = %v, want %v", !tc.limit, tc.limit)
			}
			if n := len(err.Error()); n > 400 {
				t.Errorf("message of %d bytes: %.300s…", n, err)
			}
			if d > time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// hardeningPickleSeeds are FuzzPickle seeds for the length checks.
func hardeningPickleSeeds() [][]byte {
	return [][]byte{
		pk(0x80, 2, "L", strings.Repeat("9", 5000), "L\n."),
		pk(0x80, 2, "L", strings.Repeat("9", 100), "L\n."),
		pk(0x80, 2, "I", strings.Repeat("1", 5000), "\n."),
		pk(0x80, 2, 0x8a, 200, make([]byte, 200), "."),
		pk(0x80, 2, 0x8b, 0, 0, 1, 0, make([]byte, 300), "."),
		pk(0x80, 4, 0x8d, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f, "ab."),
		pk(0x80, 4, unicode(strings.Repeat("m", 300)), unicode("x"), 0x93, "."),
	}
}

// hardeningArchiveSeeds are FuzzArchive seeds with lying headers.
func hardeningArchiveSeeds(t testing.TB) [][]byte {
	good := pk(0x80, 2, "}.")
	crc := crc32.ChecksumIEEE(good)
	def := deflateBytes(t, good)
	zeros, zcrc := deflateZeros(t, 4<<20)
	return [][]byte{
		makeRawZip(t, rawEntry{"archive/data.pkl", zip.Deflate, bytes.Repeat([]byte{0x5a}, 512), 60 << 30, 0}),
		makeRawZip(t, rawEntry{"archive/data.pkl", zip.Deflate, zeros, 1000, zcrc}),
		makeRawZip(t, rawEntry{"archive/data.pkl", zip.Deflate, def, 1000, crc}),
		makeRawZip(t, rawEntry{"archive/data.pkl", zip.Deflate, def, uint64(len(good)), crc}),
		makeRawZip(t, rawEntry{"archive/data.pkl", zip.Store, good, 1 << 20, crc}),
		makeRawZip(t, rawEntry{"archive/data.pkl", zip.Store, good, uint64(len(good)), crc ^ 1}),
	}
}
