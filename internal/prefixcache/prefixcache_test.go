package prefixcache

import (
	"errors"
	"reflect"
	"testing"
)

// state returns the state ids of a state written as text, one id per character (the first n of them).
func state(s string, n int) []int {
	ids := make([]int, 0, n)
	for _, r := range s[:n] {
		ids = append(ids, int(r))
	}
	return ids
}

func states(ss ...string) [][]int {
	out := make([][]int, len(ss))
	for i, s := range ss {
		out[i] = state(s, len(s))
	}
	return out
}

func hits[V any](p *Plan[V]) (cached []any, keep []bool) {
	for _, s := range p.Slots {
		if s.Hit {
			cached = append(cached, s.Cached)
		} else {
			cached = append(cached, nil)
		}
		keep = append(keep, s.Keep)
	}
	return cached, keep
}

// run plans a batch, makes room and stores the given prefixes (empty: none), as the server does around a pass.
func run(c *Cache[string], batch [][]int, prefixes ...string) *Plan[string] {
	p := c.Plan(batch, false)
	c.MakeRoom(p)
	for i, pre := range prefixes {
		if pre != "" {
			p.Slots[i].SetPrefix(pre)
		}
	}
	c.Store(p)
	return p
}

func TestPlanKeepStore(t *testing.T) {
	c := New[string](2, 3, DefaultMaxTokens)
	batch := append(states("abc", "abd", "abe", "abd"), state("abc", 2))
	p := c.Plan(batch, false)
	cached, keep := hits(p)
	if !reflect.DeepEqual(cached, []any{nil, nil, nil, nil, nil}) || !reflect.DeepEqual(keep, []bool{false, true, true, true, false}) {
		t.Fatalf("plan: cached %v keep %v", cached, keep)
	}
	if p.Slots[4].Keyed {
		t.Fatal("a 2-token state under min_tokens 3 must have no key")
	}
	c.MakeRoom(p)
	for i, pre := range []string{"", "p2", "p3", "p2", ""} {
		if pre != "" {
			p.Slots[i].SetPrefix(pre)
		}
	}
	c.Store(p)
	if got := c.Entries(); !reflect.DeepEqual(got, []string{"p3", "p2"}) {
		t.Fatalf("entries %v", got)
	}
	if s := c.Stats(); s.Hits != 0 || s.Misses != 4 {
		t.Fatalf("stats %+v", s)
	}

	p = c.Plan(states("abe", "abf"), false)
	cached, keep = hits(p)
	if !reflect.DeepEqual(cached, []any{"p3", nil}) || !reflect.DeepEqual(keep, []bool{true, true}) {
		t.Fatalf("plan 2: cached %v keep %v", cached, keep)
	}
	c.MakeRoom(p)
	p.Slots[0].SetPrefix("p3")
	p.Slots[1].SetPrefix("p4")
	c.Store(p)
	if got := c.Entries(); !reflect.DeepEqual(got, []string{"p3", "p4"}) {
		t.Fatalf("entries %v", got)
	}
	if s := c.Stats(); s.Hits != 1 || s.Misses != 5 {
		t.Fatalf("stats %+v", s)
	}

	off := New[string](0, 0, DefaultMaxTokens)
	if _, keep := hits(off.Plan(states("abc"), false)); !reflect.DeepEqual(keep, []bool{false}) {
		t.Fatalf("size 0: keep %v", keep)
	}
}

func TestTokenBound(t *testing.T) {
	c := New[string](4, 0, 10)
	p := run(c, states("aaaaaaaaaaa", "bbbbbb", "ccccc"), "", "", "pc")
	if p.Slots[0].Keyed {
		t.Fatal("an 11-token state over max_tokens 10 must have no key")
	}
	if _, keep := hits(p); !reflect.DeepEqual(keep, []bool{false, false, true}) {
		t.Fatalf("keep %v", keep)
	}
	if got, s := c.Entries(), c.Stats(); !reflect.DeepEqual(got, []string{"pc"}) || s.Hits != 0 || s.Misses != 2 {
		t.Fatalf("entries %v stats %+v", got, s)
	}
	run(c, states("dddd"), "pd")
	if got := c.Entries(); !reflect.DeepEqual(got, []string{"pc", "pd"}) {
		t.Fatalf("entries %v", got)
	}
	run(c, states("eee"), "pe")
	if got, s := c.Entries(), c.Stats(); !reflect.DeepEqual(got, []string{"pd", "pe"}) || s.Tokens != 7 {
		t.Fatalf("entries %v stats %+v", got, s)
	}
	if DefaultMaxTokens != 65536 {
		t.Fatal("DefaultMaxTokens")
	}
}

func TestMakeRoomEvictsBeforeThePass(t *testing.T) {
	c := New[string](1, 0, DefaultMaxTokens)
	run(c, states("old"), "p-old")
	p := c.Plan(states("new"), false)
	c.MakeRoom(p)
	if got := c.Entries(); len(got) != 0 {
		t.Fatalf("the old state must be gone before the pass, still have %v", got)
	}
	// A hit the batch holds stays valid in its slot even when MakeRoom drops it.
	run(c, states("aa"), "pa")
	p = c.Plan(states("aa", "bb"), false)
	c.MakeRoom(p)
	if !p.Slots[0].Hit || p.Slots[0].Cached != "pa" || p.Slots[0].Keep {
		t.Fatalf("slot 0 %+v", p.Slots[0])
	}
}

func TestKeyIncludesOptionIsolation(t *testing.T) {
	c := New[string](4, 0, DefaultMaxTokens)
	run(c, states("abc"), "p")
	if p := c.Plan(states("abc"), true); p.Slots[0].Hit {
		t.Fatal("an isolated-options state must not hit a plain one")
	}
	if NewKey([]int{1, 2}, false) == NewKey([]int{1, 3}, false) || NewKey([]int{7}, false).Len() != 1 {
		t.Fatal("keys")
	}
}

var errOOM = errors.New("out of memory")

// model stands for the model: it fails as told and returns a prefix for every kept or hit request.
type model struct {
	calls int
	fail  string // "", "cached" (fails when a prefix is held), "always", "other"
	name  string
}

func (m *model) pass(c *Cache[string]) func(*Plan[string]) error {
	return func(p *Plan[string]) error {
		m.calls++
		hit := false
		for _, s := range p.Slots {
			hit = hit || s.Hit
		}
		held := hit || c.Stats().Entries > 0
		switch {
		case m.fail == "always", m.fail == "cached" && held:
			return errOOM
		case m.fail == "other":
			return errors.New("boom")
		}
		for i, s := range p.Slots {
			if s.Hit {
				p.Slots[i].SetPrefix(s.Cached)
			} else if s.Keep {
				p.Slots[i].SetPrefix(m.name)
			}
		}
		return nil
	}
}

func isOOM(err error) bool { return errors.Is(err, errOOM) }

func TestRunOOMRetry(t *testing.T) {
	c := New[string](4, 0, DefaultMaxTokens)
	batch := states("the state")

	m := &model{name: "first"}
	p, err := c.Run(batch, false, m.pass(c), isOOM)
	if err != nil || p.Slots[0].Hit || c.Stats().Entries != 1 {
		t.Fatalf("first call: %v hit %v stats %+v", err, p.Slots[0].Hit, c.Stats())
	}

	// The hit fails; the retry runs as a miss and its prefix is the only entry.
	m = &model{fail: "cached", name: "retry"}
	p, err = c.Run(batch, false, m.pass(c), isOOM)
	if err != nil || p.Slots[0].Hit || m.calls != 2 || c.Stats().OOMRetries != 1 {
		t.Fatalf("cached: %v hit %v calls %d stats %+v", err, p.Slots[0].Hit, m.calls, c.Stats())
	}
	if got := c.Entries(); !reflect.DeepEqual(got, []string{"retry"}) {
		t.Fatalf("entries %v", got)
	}

	m = &model{fail: "always"}
	if _, err = c.Run(batch, false, m.pass(c), isOOM); !isOOM(err) || m.calls != 2 || c.Stats().Entries != 0 || c.Stats().OOMRetries != 2 {
		t.Fatalf("always: %v calls %d stats %+v", err, m.calls, c.Stats())
	}

	m = &model{fail: "always"}
	if _, err = c.Run(batch, false, m.pass(c), isOOM); !isOOM(err) || m.calls != 1 {
		t.Fatalf("nothing cached: %v calls %d", err, m.calls)
	}

	if _, err = c.Run(batch, false, (&model{name: "again"}).pass(c), isOOM); err != nil || c.Stats().Entries != 1 {
		t.Fatalf("refill: %v %+v", err, c.Stats())
	}
	m = &model{fail: "other"}
	if _, err = c.Run(batch, false, m.pass(c), isOOM); err == nil || isOOM(err) || m.calls != 1 || c.Stats().Entries != 1 {
		t.Fatalf("other error: %v calls %d stats %+v", err, m.calls, c.Stats())
	}
}

// TestContains checks that Contains sees what Store inserted and eviction removed, and counts nothing.
func TestContains(t *testing.T) {
	c := New[int](1, 0, 100)
	a, b := []int{1, 2, 3}, []int{4, 5}
	if c.Contains(NewKey(a, false)) {
		t.Fatal("empty cache contains a state")
	}
	for _, ids := range [][]int{a, b} {
		p := c.Plan([][]int{ids}, false)
		p.Slots[0].SetPrefix(len(ids))
		c.Store(p)
	}
	if c.Contains(NewKey(a, false)) || !c.Contains(NewKey(b, false)) || c.Contains(NewKey(b, true)) {
		t.Errorf("after storing a then b in a one-state cache: a %v, b %v, b isolated %v",
			c.Contains(NewKey(a, false)), c.Contains(NewKey(b, false)), c.Contains(NewKey(b, true)))
	}
	if st := c.Stats(); st.Hits != 0 || st.Misses != 2 {
		t.Errorf("stats %+v: Contains counted", st)
	}
}
