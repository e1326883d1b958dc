package torchpt

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
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

// gibBomb is bombBytes (1 GiB) of zeros deflated (about 1 MB) and its
// CRC-32, built once for the tests that need it.
var gibBomb struct {
	once sync.Once
	data []byte
	crc  uint32
}

func oneGiBBomb(t testing.TB) ([]byte, uint32) {
	gibBomb.once.Do(func() { gibBomb.data, gibBomb.crc = deflateZeros(t, bombBytes) })
	return gibBomb.data, gibBomb.crc
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
func decodeMeasured(data []byte, lim Limits) (v any, alloc uint64, d time.Duration, err error) {
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	v, err = Decode(bytes.NewReader(data), int64(len(data)), "evil.pt", lim)
	d = time.Since(start)
	runtime.ReadMemStats(&after)
	return v, after.TotalAlloc - before.TotalAlloc, d, err
}

// TestHardeningZipSizes: no declared size is trusted. A 19 KB file declaring a
// 60 GiB data.pkl, zip bombs with honest and lying headers, and entries
// shorter or longer than they say are refused with a typed *Error naming the
// entry, without allocating what the headers claim.
func TestHardeningZipSizes(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, 19<<10)
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	gib, gibCRC := oneGiBBomb(t)
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
		{"bomb, honest header", rawEntry{"archive/data.pkl", zip.Deflate, gib, bombBytes, gibCRC}, true, "over the 67108864-byte limit"},
		{"bomb, lying header", rawEntry{"archive/data.pkl", zip.Deflate, gib, 1000, gibCRC}, true, "longer than the 1000 bytes it declares"},
		{"bomb under the limit", rawEntry{"archive/data.pkl", zip.Deflate, mib60, 60 << 20, mib60CRC}, true, "zip bomb"},
		{"deflated, short", rawEntry{"archive/data.pkl", zip.Deflate, goodDeflated, 1000, goodCRC}, false, "shorter than the 1000"},
		{"deflated, long", rawEntry{"archive/data.pkl", zip.Deflate, goodDeflated, 2, goodCRC}, true, "longer than the 2 bytes"},
		{"stored, lying", rawEntry{"archive/data.pkl", zip.Store, good, 1 << 20, goodCRC}, false, "stored entry declares 1048576 bytes but occupies 4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := makeRawZip(t, tc.entry)
			_, alloc, d, err := decodeMeasured(data, DefaultLimits)
			var te *Error
			if !errors.As(err, &te) || te.File != "evil.pt" || te.Entry != "archive/data.pkl" ||
				!strings.Contains(err.Error(), tc.reason) {
				t.Fatalf("got %v, want an *Error on archive/data.pkl mentioning %q", err, tc.reason)
			}
			if errors.Is(err, ErrLimit) != tc.limit {
				t.Errorf("errors.Is(err, ErrLimit) = %v, want %v", !tc.limit, tc.limit)
			}
			if alloc > 8<<20 {
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
	bomb, bombCRC := oneGiBBomb(t)
	pklEntry := rawEntry{"a/data.pkl", zip.Store, pkl, uint64(len(pkl)), crc32.ChecksumIEEE(pkl)}
	tests := []struct {
		name    string
		storage rawEntry
		lim     Limits
		reason  string
	}{
		{"bomb behind 16 declared bytes", rawEntry{"a/data/0", zip.Deflate, bomb, 16, bombCRC}, DefaultLimits, "longer than the 16 bytes"},
		{"header disagrees with the pickle", rawEntry{"a/data/0", zip.Deflate, bomb, bombBytes, bombCRC}, DefaultLimits, "needs 16"},
		{"over the archive's total", rawEntry{"a/data/0", zip.Store, st, 16, crc32.ChecksumIEEE(st)}, Limits{MaxTotalBytes: int64(len(pkl)) + 8}, "left of the"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := makeRawZip(t, pklEntry, tc.storage)
			_, alloc, _, err := decodeMeasured(data, tc.lim)
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
			_, alloc, _, err := decodeMeasured(data, DefaultLimits)
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
			if alloc > 16<<20 {
				t.Errorf("allocated %d bytes", alloc)
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

// le32 is n as a BININT.
func le32(n int) []byte { return []byte{'J', byte(n), byte(n >> 8), byte(n >> 16), byte(n >> 24)} }

// TestHardeningObjectBomb (pickle objects): a pickle is bounded by the
// objects it builds, not only by its bytes and depth. A 476 KB head.pt that
// called _codecs.encode on a memoised 400 KB string 9,500 times reached
// 5 GB; a chain of millions of one-element tuples 45 bytes a byte. Both are
// refused with ErrLimit once their objects pass the pickle's size plus 1
// MiB, having allocated no more than twice the file plus 4 MiB (the pickle
// read, the objects, Go's own overhead on the estimate).
func TestHardeningObjectBomb(t *testing.T) {
	big := strings.Repeat("a", 400_000)
	codecs := pk(0x80, 2, unicode(big), 'q', 0, '0', "c_codecs\nencode\n", 'q', 1, '0', unicode("latin1"), 'q', 2, '0')
	codecs = append(codecs, bytes.Repeat([]byte{'h', 1, 'h', 0, 'h', 2, 0x86, 'R'}, 9500)...)
	codecs = append(codecs, '.')
	chain := pk(0x80, 2, 'N', bytes.Repeat([]byte{0x85}, 4<<20), '.')
	for _, tc := range []struct {
		name string
		pkl  []byte
	}{{"codecs", codecs}, {"tuple chain", chain}} {
		t.Run(tc.name, func(t *testing.T) {
			data := makeZip(t, entry{"a/data.pkl", tc.pkl})
			_, alloc, _, err := decodeMeasured(data, DefaultLimits)
			var te *Error
			if !errors.As(err, &te) || !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "objects built exceed") {
				t.Fatalf("got %v, want an ErrLimit on the objects built", err)
			}
			t.Logf("%d-byte file: %v (allocated %d KiB)", len(data), err, alloc>>10)
			if limit := uint64(2*len(data) + 4<<20); alloc > limit {
				t.Errorf("allocated %d bytes, want under %d", alloc, limit)
			}
		})
	}
	// The fixtures load under the default budget.
	for _, f := range []string{"testdata/head.pt", "testdata/views.pt", "testdata/views_p4.pt"} {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestHardeningCompressedStorage (compressed storage): a deflated storage
// entry may not inflate past twice the archive's size (torch.save stores
// its entries); an 8 MB archive declaring a 64 MiB deflated storage is
// refused before anything is inflated. Stored entries are unaffected.
func TestHardeningCompressedStorage(t *testing.T) {
	const numel = 16 << 20 // 64 MiB of float32
	pid := pk("(", unicode("storage"), "ctorch\nFloatStorage\n", unicode("0"), unicode("cpu"), le32(numel), "tQ")
	pkl := tensorPickle(pid, 0, []byte{1}, []byte{1})
	noise := make([]byte, 8<<20)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range noise {
		noise[i] = byte(rng.Uint32())
	}
	data := makeRawZip(t, rawEntry{"a/data.pkl", zip.Store, pkl, uint64(len(pkl)), crc32.ChecksumIEEE(pkl)},
		rawEntry{"a/data/0", zip.Deflate, noise, 4 * numel, 0})
	_, alloc, _, err := decodeMeasured(data, DefaultLimits)
	if !errors.Is(err, ErrLimit) || !strings.Contains(err.Error(), "compressed entries may inflate to") {
		t.Fatalf("got %v, want an ErrLimit on the inflated bytes", err)
	}
	if alloc > 4<<20 {
		t.Errorf("allocated %d bytes refusing it", alloc)
	}
	// The same storage deflated for real, with a budget that allows it, loads.
	st := floatBytes(1, 2, 3, 4)
	pkl = tensorPickle(storagePid("FloatStorage", "0", 4), 0, []byte{4}, []byte{1})
	data = makeRawZip(t, rawEntry{"a/data.pkl", zip.Store, pkl, uint64(len(pkl)), crc32.ChecksumIEEE(pkl)},
		rawEntry{"a/data/0", zip.Deflate, deflateBytes(t, st), 16, crc32.ChecksumIEEE(st)})
	if _, err := Decode(bytes.NewReader(data), int64(len(data)), "ok.pt", DefaultLimits); err != nil {
		t.Fatal(err)
	}
}

// TestHardeningStrideZero (stride-0 views): a view may have at most 4,096
// elements more than its storage holds, so that a 19 KB file cannot stand
// for hundreds of megabytes once its views are read.
func TestHardeningStrideZero(t *testing.T) {
	st := floatBytes(7)
	for _, tc := range []struct {
		shape []byte
		ok    bool
	}{{[]byte{64, 64}, true}, {[]byte{100, 50}, false}, {[]byte{255, 255, 255}, false}} {
		stride := make([]byte, len(tc.shape))
		pkl := tensorPickle(storagePid("FloatStorage", "0", 1), 0, tc.shape, stride)
		data := makeZip(t, entry{"a/data.pkl", pkl}, entry{"a/data/0", st})
		v, err := Decode(bytes.NewReader(data), int64(len(data)), "views.pt", DefaultLimits)
		if !tc.ok {
			if err == nil || !strings.Contains(err.Error(), "expands a 1-element storage") {
				t.Errorf("shape %v: %v, want refused", tc.shape, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("shape %v: %v", tc.shape, err)
		}
		f, err := v.(*Tensor).Float32()
		if err != nil || len(f) != 4096 || f[0] != 7 || f[4095] != 7 {
			t.Fatalf("shape %v: %d elements, %v", tc.shape, len(f), err)
		}
	}
}
