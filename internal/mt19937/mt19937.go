// Package mt19937 is CPython's random.Random generator: the 32-bit Mersenne Twister seeded from an integer the way
// CPython seeds it, with getrandbits, _randbelow, shuffle and random giving the same values as Python for the same
// seed. Kev's permute endpoint draws its option orders from random.Random(seed).shuffle, so a port that wants the
// same orders needs this exact stream.
//
// A Rand is not safe for concurrent use.
package mt19937

import (
	"math/big"
	"math/bits"
)

const (
	n         = 624
	m         = 397
	matrixA   = 0x9908b0df
	upperMask = 0x80000000
	lowerMask = 0x7fffffff
)

// Rand is one MT19937 stream.
type Rand struct {
	mt  [n]uint32
	mti int
}

// New returns the generator of Python's random.Random(seed). As in CPython, the sign is dropped: New(-5) and
// New(5) give the same stream.
func New(seed int64) *Rand {
	u := uint64(seed)
	if seed < 0 {
		u = -u // two's complement: also right for math.MinInt64
	}
	key := []uint32{uint32(u)}
	if hi := uint32(u >> 32); hi != 0 {
		key = append(key, hi)
	}
	r := &Rand{}
	r.initByArray(key)
	return r
}

// NewBig returns the generator of Python's random.Random(seed) for an integer of any size (the sign is dropped).
func NewBig(seed *big.Int) *Rand {
	words := new(big.Int).Abs(seed).Bits()
	var key []uint32
	for _, w := range words {
		for s := 0; s < bits.UintSize; s += 32 {
			key = append(key, uint32(uint64(w)>>s))
		}
	}
	for len(key) > 1 && key[len(key)-1] == 0 {
		key = key[:len(key)-1]
	}
	if len(key) == 0 {
		key = []uint32{0}
	}
	r := &Rand{}
	r.initByArray(key)
	return r
}

func (r *Rand) initGenrand(s uint32) {
	r.mt[0] = s
	for i := 1; i < n; i++ {
		r.mt[i] = 1812433253*(r.mt[i-1]^(r.mt[i-1]>>30)) + uint32(i)
	}
	r.mti = n
}

// initByArray is the reference init_by_array, which CPython uses for every integer seed.
func (r *Rand) initByArray(key []uint32) {
	r.initGenrand(19650218)
	i, j := 1, 0
	k := max(n, len(key))
	for ; k > 0; k-- {
		r.mt[i] = (r.mt[i] ^ ((r.mt[i-1] ^ (r.mt[i-1] >> 30)) * 1664525)) + key[j] + uint32(j)
		i++
		j++
		if i >= n {
			r.mt[0] = r.mt[n-1]
			i = 1
		}
		if j >= len(key) {
			j = 0
		}
	}
	for k = n - 1; k > 0; k-- {
		r.mt[i] = (r.mt[i] ^ ((r.mt[i-1] ^ (r.mt[i-1] >> 30)) * 1566083941)) - uint32(i)
		i++
		if i >= n {
			r.mt[0] = r.mt[n-1]
			i = 1
		}
	}
	r.mt[0] = 0x80000000
}

// Uint32 returns the next 32 bits of the stream (genrand_uint32; Python's getrandbits(32)).
func (r *Rand) Uint32() uint32 {
	if r.mti >= n {
		r.twist()
	}
	y := r.mt[r.mti]
	r.mti++
	y ^= y >> 11
	y ^= (y << 7) & 0x9d2c5680
	y ^= (y << 15) & 0xefc60000
	y ^= y >> 18
	return y
}

func (r *Rand) twist() {
	mag := func(y uint32) uint32 { return (y & 1) * matrixA }
	var kk int
	for kk = 0; kk < n-m; kk++ {
		y := (r.mt[kk] & upperMask) | (r.mt[kk+1] & lowerMask)
		r.mt[kk] = r.mt[kk+m] ^ (y >> 1) ^ mag(y)
	}
	for ; kk < n-1; kk++ {
		y := (r.mt[kk] & upperMask) | (r.mt[kk+1] & lowerMask)
		r.mt[kk] = r.mt[kk+(m-n)] ^ (y >> 1) ^ mag(y)
	}
	y := (r.mt[n-1] & upperMask) | (r.mt[0] & lowerMask)
	r.mt[n-1] = r.mt[m-1] ^ (y >> 1) ^ mag(y)
	r.mti = 0
}

// Bits returns Python's getrandbits(k) for 0 ≤ k ≤ 64: 32-bit words are drawn low word first, and the last word
// keeps its top bits. It panics if k is out of range, as a programming error.
func (r *Rand) Bits(k int) uint64 {
	if k < 0 || k > 64 {
		panic("mt19937: Bits needs 0 <= k <= 64")
	}
	if k == 0 {
		return 0
	}
	if k <= 32 {
		return uint64(r.Uint32() >> (32 - k))
	}
	lo := uint64(r.Uint32())
	return lo | uint64(r.Uint32()>>(64-k))<<32
}

// BigBits returns Python's getrandbits(k) for any k ≥ 0.
func (r *Rand) BigBits(k int) *big.Int {
	if k < 0 {
		panic("mt19937: BigBits needs k >= 0")
	}
	out := new(big.Int)
	for shift := 0; k > 0; shift += 32 {
		w := r.Uint32()
		if k < 32 {
			w >>= 32 - k
		}
		out.Or(out, new(big.Int).Lsh(big.NewInt(int64(w)), uint(shift)))
		k -= 32
	}
	return out
}

// Below returns Python's _randbelow(n) for n > 0: draw getrandbits(n.bit_length()) until it is below n. Below(0)
// returns 0 and draws nothing.
func (r *Rand) Below(n uint64) uint64 {
	if n == 0 {
		return 0
	}
	k := bits.Len64(n)
	v := r.Bits(k)
	for v >= n {
		v = r.Bits(k)
	}
	return v
}

// Shuffle permutes n items in place as Python's random.shuffle does (Python 3.11+; also 3.x without the random
// argument): for i from n-1 down to 1, swap i with Below(i+1).
func (r *Rand) Shuffle(n int, swap func(i, j int)) {
	for i := n - 1; i > 0; i-- {
		swap(i, int(r.Below(uint64(i+1))))
	}
}

// Float64 returns Python's random(): 53 random bits in [0, 1) (genrand_res53).
func (r *Rand) Float64() float64 {
	a := r.Uint32() >> 5
	b := r.Uint32() >> 6
	return (float64(a)*67108864.0 + float64(b)) * (1.0 / 9007199254740992.0)
}
