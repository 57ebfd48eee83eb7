package notifier

import (
	"fmt"
	"testing"
)

// Payloads and keys: "t#1" wakes "t#1" and "t", not "t#2"; a plain "t"
// (SQL publish: some partition) wakes "t" and every "t#..."; other names
// and queue keys are left alone.
func TestWakeMatching(t *testing.T) {
	n := &Notifier{subs: map[string]map[chan struct{}]struct{}{}}
	subs := map[string]*Subscription{}
	for _, k := range []string{"t#1", "t#2", "t", "t2#1", "queue:t"} {
		subs[k] = n.NewSubscription(k)
	}
	woken := func() map[string]bool {
		out := map[string]bool{}
		for k, s := range subs {
			select {
			case <-s.C():
				out[k] = true
			default:
			}
		}
		return out
	}
	cases := []struct {
		payload string
		want    []string
	}{
		{"t#1", []string{"t#1", "t"}},
		{"t", []string{"t#1", "t#2", "t"}},
		{"t2#1", []string{"t2#1"}},
		{"queue:t", []string{"queue:t"}},
	}
	for _, c := range cases {
		n.wake(c.payload, false)
		got := woken()
		if len(got) != len(c.want) {
			t.Fatalf("payload %q woke %v, want %v", c.payload, got, c.want)
		}
		for _, k := range c.want {
			if !got[k] {
				t.Fatalf("payload %q woke %v, want %v", c.payload, got, c.want)
			}
		}
	}
	// Set replaces the keys; Close removes them.
	subs["t#1"].Set("t#2")
	n.wake("t#1", false)
	if got := woken(); got["t#1"] {
		t.Fatalf("a subscription moved to t#2 was woken by t#1: %v", got)
	}
	subs["t#2"].Close()
	n.wake("t#2", false)
	if got := woken(); got["t#2"] || !got["t#1"] || !got["t"] {
		t.Fatalf("after Close: %v", got)
	}
	if len(n.subs["t#2"]) != 1 {
		t.Fatalf("subscribers of t#2: %d, want 1", len(n.subs["t#2"]))
	}
}

// Generation counts a name's wake-ups, its partitions' included, and the
// reconnects that wake everyone, and is counted before anyone is woken.
func TestGeneration(t *testing.T) {
	n := &Notifier{subs: map[string]map[chan struct{}]struct{}{}}
	sub := n.NewSubscription("t#1")
	if g := n.Generation("t"); g != 0 {
		t.Fatalf("generation %d before any wake-up", g)
	}
	n.wake("t#1", false)
	<-sub.C()
	if g := n.Generation("t"); g != 1 {
		t.Fatalf("a partition's wake-up: generation %d, want 1", g)
	}
	n.wake("t", false)
	n.wake("u#0", false)
	if g, u := n.Generation("t"), n.Generation("u"); g != 2 || u != 1 {
		t.Fatalf("generations t %d, u %d; want 2, 1", g, u)
	}
	n.wake("", true)
	if g, u, v := n.Generation("t"), n.Generation("u"), n.Generation("v"); g != 3 || u != 2 || v != 1 {
		t.Fatalf("after a reconnect: t %d, u %d, v %d; want 3, 2, 1", g, u, v)
	}
}

// Past maxGens names the counts fold into the one of every name: no
// name's generation goes back, and the map stays bounded.
func TestGenerationBounded(t *testing.T) {
	n := &Notifier{subs: map[string]map[chan struct{}]struct{}{}}
	for range 5 {
		n.wake("busy", false)
	}
	for i := 1; i < maxGens; i++ {
		n.wake(fmt.Sprintf("t%d", i), false)
	}
	before := map[string]uint64{"busy": n.Generation("busy"), "t1": n.Generation("t1"), "new": n.Generation("new")}
	n.wake("new", false)
	if len(n.gens) > maxGens {
		t.Fatalf("%d names counted, more than %d", len(n.gens), maxGens)
	}
	for name, g := range before {
		after := n.Generation(name)
		if after < g || (name == "new" && after == g) {
			t.Errorf("%s: generation %d before the fold, %d after (woken: %v)", name, g, after, name == "new")
		}
	}
}
