// Package checkpoint implements the storage side of Gleaner's checkpoint
// contract for best-effort steps: a step saves its state every N steps and on
// SIGTERM, and on start resumes from the newest checkpoint that is whole.
//
// A checkpoint is an opaque payload framed with its step number and a SHA-256
// checksum, stored under a name that sorts by step in a directory or an
// S3-compatible bucket. Writes are atomic (a directory write goes to a temporary
// file, is synced and renamed; an S3 PUT is all-or-nothing), and reads verify the
// checksum, so a file torn by a kill mid-write is skipped, never loaded.
package checkpoint

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
)

// magic opens every checkpoint; the trailing digit is the format version.
const magic = "GLNCKPT1"

const (
	headerLen   = len(magic) + 8 + 8 // magic, step, payload length
	checksumLen = sha256.Size
	namePrefix  = "ckpt-"
	nameSuffix  = ".gck"
)

// Checkpoint is one saved state of a step.
type Checkpoint struct {
	// Step is the number of training steps completed when it was taken.
	Step int64
	// Payload is the step's own serialized state.
	Payload []byte
}

// Encode frames a checkpoint: magic, step and payload length (big endian),
// payload, then the SHA-256 of everything before it.
func Encode(c Checkpoint) []byte {
	buf := make([]byte, 0, headerLen+len(c.Payload)+checksumLen)
	buf = append(buf, magic...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(c.Step))
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(c.Payload)))
	buf = append(buf, c.Payload...)
	sum := sha256.Sum256(buf)
	return append(buf, sum[:]...)
}

// Decode checks a framed checkpoint and returns it. Any truncation, extension
// or bit flip fails: the length must match exactly and the checksum must agree.
func Decode(data []byte) (Checkpoint, error) {
	if len(data) < headerLen+checksumLen {
		return Checkpoint{}, fmt.Errorf("only %d bytes, shorter than the %d-byte frame: torn or not a checkpoint", len(data), headerLen+checksumLen)
	}
	if !bytes.Equal(data[:len(magic)], []byte(magic)) {
		return Checkpoint{}, fmt.Errorf("does not start with %q: not a checkpoint of this format", magic)
	}
	step := binary.BigEndian.Uint64(data[len(magic):])
	n := binary.BigEndian.Uint64(data[len(magic)+8:])
	if want := uint64(len(data) - headerLen - checksumLen); n != want {
		return Checkpoint{}, fmt.Errorf("header says %d payload bytes, file holds %d: torn write", n, want)
	}
	body, sum := data[:len(data)-checksumLen], data[len(data)-checksumLen:]
	if got := sha256.Sum256(body); !bytes.Equal(got[:], sum) {
		return Checkpoint{}, fmt.Errorf("checksum mismatch: corrupt or torn write")
	}
	payload := make([]byte, n)
	copy(payload, data[headerLen:])
	return Checkpoint{Step: int64(step), Payload: payload}, nil
}

// Name is the object name of the checkpoint at step; names sort by step.
func Name(step int64) string {
	return fmt.Sprintf("%s%012d%s", namePrefix, step, nameSuffix)
}

// ParseName returns the step encoded in a checkpoint name, or false if name is
// not one (temporary files and anything else in the location are ignored).
func ParseName(name string) (int64, bool) {
	if !strings.HasPrefix(name, namePrefix) || !strings.HasSuffix(name, nameSuffix) {
		return 0, false
	}
	digits := strings.TrimSuffix(strings.TrimPrefix(name, namePrefix), nameSuffix)
	step, err := strconv.ParseInt(digits, 10, 64)
	if err != nil || step < 0 {
		return 0, false
	}
	return step, true
}
