package torchpt

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"

	"github.com/klauspost/compress/zip"
)

// Save writes v as a torch.save archive (root "archive", protocol-2 pickle,
// stored entries), laid out as torch.save lays it out. v may hold *Dict,
// *List, Tuple, string, []byte, int64, int, *big.Int, float64, bool, nil and
// *Tensor (each tensor is saved contiguous, with its own storage).
func Save(w io.Writer, v any) error {
	p := &pickler{memo: map[any]int{}}
	p.out = append(p.out, 0x80, 2)
	if err := p.save(v); err != nil {
		return err
	}
	p.out = append(p.out, '.')
	zw := zip.NewWriter(w)
	put := func(name string, data []byte) error {
		f, err := zw.CreateHeader(&zip.FileHeader{Name: "archive/" + name, Method: zip.Store})
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		return err
	}
	if err := put("data.pkl", p.out); err != nil {
		return err
	}
	if err := put("byteorder", []byte("little")); err != nil {
		return err
	}
	for i, data := range p.storages {
		if err := put("data/"+strconv.Itoa(i), data); err != nil {
			return err
		}
	}
	if err := put("version", []byte("3\n")); err != nil {
		return err
	}
	return zw.Close()
}

type pickler struct {
	out      []byte
	memo     map[any]int // pointer identity -> memo slot
	next     int
	storages [][]byte
}

func (p *pickler) put() {
	if p.next < 256 {
		p.out = append(p.out, 'q', byte(p.next))
	} else {
		p.out = append(p.out, 'r')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(p.next))
	}
	p.next++
}

func (p *pickler) str(s string) {
	p.out = append(p.out, 'X')
	p.out = binary.LittleEndian.AppendUint32(p.out, uint32(len(s)))
	p.out = append(p.out, s...)
	p.put()
}

func (p *pickler) global(mod, name string) {
	p.out = append(p.out, 'c')
	p.out = append(p.out, mod+"\n"+name+"\n"...)
	p.put()
}

func (p *pickler) integer(n int64) {
	switch {
	case n >= 0 && n < 256:
		p.out = append(p.out, 'K', byte(n))
	case n >= 0 && n < 65536:
		p.out = append(p.out, 'M', byte(n), byte(n>>8))
	case n >= math.MinInt32 && n <= math.MaxInt32:
		p.out = append(p.out, 'J')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(int32(n)))
	default:
		p.long(big.NewInt(n))
	}
}

// long writes LONG1: little-endian two's complement, minimal length.
func (p *pickler) long(b *big.Int) {
	var le []byte
	if b.Sign() >= 0 {
		be := b.Bytes()
		for i := len(be) - 1; i >= 0; i-- {
			le = append(le, be[i])
		}
		if len(le) == 0 || le[len(le)-1]&0x80 != 0 {
			le = append(le, 0)
		}
	} else {
		n := (b.BitLen() + 8) / 8
		m := new(big.Int).Add(b, new(big.Int).Lsh(big.NewInt(1), uint(8*n)))
		be := m.Bytes()
		le = make([]byte, n)
		for i := range be {
			le[len(be)-1-i] = be[i]
		}
	}
	p.out = append(p.out, 0x8a, byte(len(le)))
	p.out = append(p.out, le...)
}

func (p *pickler) save(v any) error {
	switch v := v.(type) {
	case nil:
		p.out = append(p.out, 'N')
	case bool:
		if v {
			p.out = append(p.out, 0x88)
		} else {
			p.out = append(p.out, 0x89)
		}
	case int:
		p.integer(int64(v))
	case int64:
		p.integer(v)
	case *big.Int:
		p.long(v)
	case float64:
		p.out = append(p.out, 'G')
		p.out = binary.BigEndian.AppendUint64(p.out, math.Float64bits(v))
	case string:
		p.str(v)
	case []byte:
		p.out = append(p.out, 'B')
		p.out = binary.LittleEndian.AppendUint32(p.out, uint32(len(v)))
		p.out = append(p.out, v...)
		p.put()
	case Tuple:
		if len(v) == 0 {
			p.out = append(p.out, ')')
			return nil
		}
		p.out = append(p.out, '(')
		for _, x := range v {
			if err := p.save(x); err != nil {
				return err
			}
		}
		p.out = append(p.out, 't')
		p.put()
	case *List:
		if slot, ok := p.memo[v]; ok {
			p.get(slot)
			return nil
		}
		p.out = append(p.out, ']')
		p.memo[v] = p.next
		p.put()
		if len(v.Items) > 0 {
			p.out = append(p.out, '(')
			for _, x := range v.Items {
				if err := p.save(x); err != nil {
					return err
				}
			}
			p.out = append(p.out, 'e')
		}
	case *Dict:
		if slot, ok := p.memo[v]; ok {
			p.get(slot)
			return nil
		}
		if v.Class == "collections.OrderedDict" {
			p.global("collections", "OrderedDict")
			p.out = append(p.out, ')', 'R')
		} else {
			p.out = append(p.out, '}')
		}
		p.memo[v] = p.next
		p.put()
		if v.Len() > 0 {
			p.out = append(p.out, '(')
			for i, k := range v.keys {
				if err := p.save(k); err != nil {
					return err
				}
				if err := p.save(v.values[i]); err != nil {
					return err
				}
			}
			p.out = append(p.out, 'u')
		}
		if v.Attrs != nil && v.Attrs.Len() > 0 {
			if err := p.save(v.Attrs); err != nil {
				return err
			}
			p.out = append(p.out, 'b')
		}
	case *Tensor:
		return p.tensor(v)
	default:
		return fmt.Errorf("torchpt: cannot save a %T", v)
	}
	return nil
}

func (p *pickler) get(slot int) {
	if slot < 256 {
		p.out = append(p.out, 'h', byte(slot))
		return
	}
	p.out = append(p.out, 'j')
	p.out = binary.LittleEndian.AppendUint32(p.out, uint32(slot))
}

var storageNames = map[DType]string{}

func init() {
	for name, dt := range storageTypes {
		storageNames[dt] = name
	}
}

// tensor writes _rebuild_tensor_v2(storage, 0, size, stride, False, OrderedDict()).
func (p *pickler) tensor(t *Tensor) error {
	name, ok := storageNames[t.DType]
	if !ok {
		return fmt.Errorf("torchpt: cannot save a tensor of dtype %s", t.DType)
	}
	// Gather the elements contiguously.
	n, size := t.Len(), t.DType.Size()
	data := make([]byte, n*size)
	if n > 0 {
		idx := make([]int, len(t.Shape))
		pos := t.Offset
		for i := 0; i < n; i++ {
			if (pos+1)*size > len(t.Storage) {
				return fmt.Errorf("torchpt: tensor view runs past its storage")
			}
			copy(data[i*size:], t.Storage[pos*size:(pos+1)*size])
			for k := len(idx) - 1; k >= 0; k-- {
				idx[k]++
				pos += t.Stride[k]
				if idx[k] < t.Shape[k] {
					break
				}
				pos -= idx[k] * t.Stride[k]
				idx[k] = 0
			}
		}
	}
	key := len(p.storages)
	p.storages = append(p.storages, data)
	p.global("torch._utils", "_rebuild_tensor_v2")
	p.out = append(p.out, '(', '(')
	p.str("storage")
	p.global("torch", name)
	p.str(strconv.Itoa(key))
	p.str("cpu")
	p.integer(int64(n))
	p.out = append(p.out, 't')
	p.put()
	p.out = append(p.out, 'Q')
	p.integer(0)
	shape := make(Tuple, len(t.Shape))
	stride := make(Tuple, len(t.Shape))
	s := 1
	for i := len(t.Shape) - 1; i >= 0; i-- {
		shape[i] = int64(t.Shape[i])
		stride[i] = int64(s)
		s *= t.Shape[i]
	}
	if err := p.save(shape); err != nil {
		return err
	}
	if err := p.save(stride); err != nil {
		return err
	}
	p.out = append(p.out, 0x89)
	p.global("collections", "OrderedDict")
	p.out = append(p.out, ')', 'R')
	p.put()
	p.out = append(p.out, 't')
	p.put()
	p.out = append(p.out, 'R')
	p.put()
	return nil
}

// NewFloat32 builds a contiguous float32 tensor from row-major values.
func NewFloat32(shape []int, values []float32) *Tensor {
	b := make([]byte, 4*len(values))
	for i, v := range values {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	stride := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		stride[i] = s
		s *= shape[i]
	}
	return &Tensor{DType: Float32, Shape: append([]int(nil), shape...), Stride: stride, Storage: b}
}
