//go:build cuda

package cuda

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// TestUpload uploads fresh random bytes of sizes around the launch path's limits — one word, one and more launches
// of upload_words, past uploadLaunchMax, lengths not a whole number of words — both by launch and by copy, into
// buffers past whose end lies a poisoned tail, and reads them back.
func TestUpload(t *testing.T) {
	r := newRand(t)
	for _, launch := range []bool{true, false} {
		for _, n := range []int{4, 8, 1020, 1024, 1028, 4028, 4032, 4036, 8064, 12100, 16380, 16384, 16388, 20000, 7, 1027} {
			t.Run(fmt.Sprintf("launch=%v/%d", launch, n), func(t *testing.T) {
				defer func(v bool) { uploadByLaunch = v }(uploadByLaunch)
				uploadByLaunch = launch
				src := make([]byte, n)
				for i := range src {
					src[i] = byte(r.Uint32())
				}
				err := dev.Do(func(q *Queue) error {
					m := (n + 65) &^ 1 // poisoned in 2-byte steps
					b := poisoned(t, q, m)
					defer q.Free(b)
					if err := q.Upload(b, src); err != nil {
						return err
					}
					got := download(t, q, b, m)
					if !bytes.Equal(got[:n], src) {
						return fmt.Errorf("read back differs from the upload")
					}
					for i, v := range got[n:] {
						if v != 0xff {
							return fmt.Errorf("byte %d past the upload's end is %#x: written", n+i, v)
						}
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
			})
		}
	}
}

// TestUploadAfterReader uploads into a buffer that the kernel enqueued just before reads (the ids of an embedding
// gather): the upload's launch must wait for that kernel, so the gather sees the old ids.
func TestUploadAfterReader(t *testing.T) {
	r := newRand(t)
	const T, V, d = 1000, 64, 64
	table := make([]byte, V*d*2)
	for i := range table {
		table[i] = byte(r.Uint32() & 0x3f) // finite bf16 values
	}
	ids, ids2 := make([]byte, 4*T), make([]byte, 4*T)
	for i := range T {
		binary.LittleEndian.PutUint32(ids[4*i:], uint32(r.IntN(V)))
		binary.LittleEndian.PutUint32(ids2[4*i:], uint32(r.IntN(V)))
	}
	want := make([]byte, T*d*2)
	for i := range T {
		id := binary.LittleEndian.Uint32(ids[4*i:])
		copy(want[i*d*2:(i+1)*d*2], table[int(id)*d*2:(int(id)+1)*d*2])
	}
	err := dev.Do(func(q *Queue) error {
		tb, ib, y := upload(t, q, table, 0), upload(t, q, ids, 0), poisoned(t, q, T*d*2)
		defer func() { q.Free(tb); q.Free(ib); q.Free(y) }()
		for range 20 {
			if err := q.Upload(ib, ids); err != nil {
				return err
			}
			if err := q.Embedding(y, tb, ib, T, V, d); err != nil {
				return err
			}
			if err := q.Upload(ib, ids2); err != nil { // while the gather may still run
				return err
			}
			if got := download(t, q, y, T*d*2); !bytes.Equal(got, want) {
				return fmt.Errorf("the gather read ids uploaded after it")
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
