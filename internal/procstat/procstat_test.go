package procstat

import (
	"errors"
	"runtime"
	"testing"
	"time"
)

const sample = `Name:	kev
VmPeak:	 4400000 kB
VmSize:	 4300000 kB
VmHWM:	   20480 kB
VmRSS:	   10240 kB
RssAnon:	    6144 kB
RssFile:	    4096 kB
RssShmem:	       0 kB
Threads:	12
`

func TestParse(t *testing.T) {
	s, err := Parse([]byte(sample))
	if err != nil {
		t.Fatal(err)
	}
	want := Status{VmRSS: 10240 << 10, RssAnon: 6144 << 10, RssFile: 4096 << 10, VmHWM: 20480 << 10, VmPeak: 4400000 << 10}
	if s != want {
		t.Errorf("Parse = %+v, want %+v", s, want)
	}
	for _, bad := range []string{"VmRSS: 12 MB\n", "VmRSS: -1 kB\n", "VmRSS: x kB\n", "Name: kev\n", ""} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%q): no error", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(sample))
	f.Add([]byte("VmRSS:\t1 kB\nRssAnon:\t1 kB\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && (s.VmRSS < 0 || s.RssAnon < 0 || s.RssFile < 0 || s.VmHWM < 0 || s.VmPeak < 0) {
			t.Errorf("negative counter %+v", s)
		}
	})
}

// TestSampler allocates and touches 64 MiB while sampling: the peak must see it.
func TestSampler(t *testing.T) {
	before, err := Read()
	if errors.Is(err, ErrUnavailable) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	s := Sample(time.Millisecond)
	buf := make([]byte, 64<<20)
	for i := range buf {
		buf[i] = byte(i)
	}
	time.Sleep(20 * time.Millisecond)
	peak, err := s.Stop()
	runtime.KeepAlive(buf)
	if err != nil {
		t.Fatal(err)
	}
	if peak < before.RssAnon+48<<20 {
		t.Errorf("peak RssAnon %d, want at least %d + 48 MiB", peak, before.RssAnon)
	}
}
