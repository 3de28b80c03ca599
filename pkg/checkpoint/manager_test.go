package checkpoint

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

func ckpt(step int64) Checkpoint {
	return Checkpoint{Step: step, Payload: fmt.Appendf(nil, `{"step":%d}`, step)}
}

func TestManagerKeepsNewest(t *testing.T) {
	ctx := context.Background()
	for kind, s := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			m := NewManager(s, 2)
			if c, rejected, err := m.Latest(ctx); c != nil || len(rejected) != 0 || err != nil {
				t.Fatalf("empty store: Latest = %v, %v, %v", c, rejected, err)
			}
			for _, step := range []int64{100, 200, 300} {
				if err := m.Save(ctx, ckpt(step)); err != nil {
					t.Fatal(err)
				}
			}
			names, _ := s.List(ctx)
			if want := []string{Name(200), Name(300)}; !slices.Equal(names, want) {
				t.Fatalf("after three saves with keep=2 the store holds %v, want %v", names, want)
			}
			c, _, err := m.Latest(ctx)
			if err != nil || c == nil || c.Step != 300 || string(c.Payload) != `{"step":300}` {
				t.Fatalf("Latest = %+v, %v; want step 300", c, err)
			}
		})
	}
}

// A torn newest checkpoint is skipped (and reported) and the one before it is
// loaded; the next save removes the torn one so it cannot crowd out good ones.
func TestManagerSkipsTornCheckpoints(t *testing.T) {
	ctx := context.Background()
	for kind, s := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			m := NewManager(s, 1)
			if err := m.Save(ctx, ckpt(100)); err != nil {
				t.Fatal(err)
			}
			full := Encode(ckpt(200))
			if err := s.Put(ctx, Name(200), full[:len(full)/2]); err != nil { // torn
				t.Fatal(err)
			}
			if err := s.Put(ctx, Name(300), Encode(ckpt(250))); err != nil { // renamed
				t.Fatal(err)
			}
			c, rejected, err := m.Latest(ctx)
			if err != nil || c == nil || c.Step != 100 {
				t.Fatalf("Latest = %+v, %v; want step 100, the newest whole one", c, err)
			}
			var names []string
			for _, r := range rejected {
				names = append(names, r.Name)
			}
			if want := []string{Name(300), Name(200)}; !slices.Equal(names, want) {
				t.Fatalf("rejected %v, want %v", rejected, want)
			}
			if err := m.Save(ctx, ckpt(150)); err != nil {
				t.Fatal(err)
			}
			if got, _ := s.List(ctx); !slices.Equal(got, []string{Name(150)}) {
				t.Fatalf("after saving step 150 with keep=1 the store holds %v, want only step 150", got)
			}
		})
	}
}

// Two writers on one location (an evicted pod saving its last checkpoint while
// its replacement already saves its own): neither deletes a newer whole
// checkpoint of the other's.
func TestSaveNeverDeletesANewerCheckpoint(t *testing.T) {
	ctx := context.Background()
	s, err := NewDirStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	m := NewManager(s, 1)
	if err := m.Save(ctx, ckpt(300)); err != nil {
		t.Fatal(err)
	}
	if err := m.Save(ctx, ckpt(120)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.List(ctx); !slices.Equal(got, []string{Name(120), Name(300)}) {
		t.Fatalf("store holds %v, want the newer step 300 kept beside 120", got)
	}
	if c, _, err := m.Latest(ctx); err != nil || c.Step != 300 {
		t.Fatalf("Latest = %+v, %v; want step 300", c, err)
	}
}
