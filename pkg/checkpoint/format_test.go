package checkpoint

import (
	"bytes"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	for _, c := range []Checkpoint{
		{Step: 0, Payload: []byte{}},
		{Step: 42, Payload: []byte(`{"weights":[1,2,3]}`)},
		{Step: 1 << 40, Payload: bytes.Repeat([]byte{0xff}, 4096)},
	} {
		got, err := Decode(Encode(c))
		if err != nil {
			t.Fatalf("step %d: %v", c.Step, err)
		}
		if got.Step != c.Step || !bytes.Equal(got.Payload, c.Payload) {
			t.Fatalf("round trip of step %d gave step %d, %d payload bytes", c.Step, got.Step, len(got.Payload))
		}
	}
}

// A write torn at any byte, or damaged anywhere, must never decode.
func TestDecodeRejectsEveryTruncationAndBitFlip(t *testing.T) {
	data := Encode(Checkpoint{Step: 7, Payload: []byte(`{"weights":[0.25,-1.5]}`)})
	for n := range len(data) {
		if _, err := Decode(data[:n]); err == nil {
			t.Fatalf("a checkpoint truncated to %d of %d bytes decoded", n, len(data))
		}
	}
	for i := range len(data) {
		bad := bytes.Clone(data)
		bad[i] ^= 0x10
		if _, err := Decode(bad); err == nil {
			t.Fatalf("a checkpoint with byte %d flipped decoded", i)
		}
	}
	if _, err := Decode(append(bytes.Clone(data), 0)); err == nil {
		t.Fatal("a checkpoint with a trailing byte decoded")
	}
}

func TestNames(t *testing.T) {
	if a, b := Name(9), Name(10); a >= b {
		t.Fatalf("names must sort by step: %q >= %q", a, b)
	}
	if s, ok := ParseName(Name(1234)); !ok || s != 1234 {
		t.Fatalf("ParseName(Name(1234)) = %d, %v", s, ok)
	}
	for _, n := range []string{".tmp-" + Name(3) + "-123", "ckpt-abc.gck", "ckpt--1.gck", "model.json", Name(3) + ".partial"} {
		if _, ok := ParseName(n); ok {
			t.Errorf("ParseName(%q) accepted a name that is not a checkpoint", n)
		}
	}
}
