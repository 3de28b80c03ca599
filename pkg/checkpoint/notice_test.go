package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The downward API writes one key="value" line per annotation, the value
// quoted as Go quotes strings.
func TestReadNotice(t *testing.T) {
	dir := t.TempDir()
	at := time.Date(2026, 11, 30, 21, 55, 0, 0, time.UTC)
	tests := []struct {
		name    string
		file    string // "": no file
		want    time.Time
		noticed bool
		wantErr string
	}{
		{name: "no file yet"},
		{name: "no notice", file: "example.com/team=\"ml\"\ngleaner.dev/last-checkpoint=\"2026-11-30T21:00:00Z\"\n"},
		{name: "a notice among other annotations", file: "a=\"x\"\ngleaner.dev/reclaim-notice=\"2026-11-30T21:55:00Z\"\nz=\"multi\\nline\"\n", want: at, noticed: true},
		{name: "unquoted", file: "gleaner.dev/reclaim-notice=2026-11-30T21:55:00Z\n", wantErr: "not a quoted string"},
		{name: "not a time", file: "gleaner.dev/reclaim-notice=\"soon\"\n", wantErr: "gleaner.dev/reclaim-notice"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			path := filepath.Join(dir, "annotations-"+string(rune('a'+i)))
			if tt.file != "" {
				if err := os.WriteFile(path, []byte(tt.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			got, noticed, err := ReadNotice(path)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err %v, want one naming %s and %q", err, path, tt.wantErr)
				}
				return
			}
			if err != nil || noticed != tt.noticed || !got.Equal(tt.want) {
				t.Fatalf("ReadNotice = %v, %v, %v; want %v, %v", got, noticed, err, tt.want, tt.noticed)
			}
		})
	}
}

// A watch sends a notice when it appears and when it moves, not while it
// stands; a withdrawn notice sends the zero time, once; a notice given again
// is sent again; an unreadable file is reported and changes nothing.
func TestWatchNotices(t *testing.T) {
	path := filepath.Join(t.TempDir(), "annotations")
	write := func(content string) {
		t.Helper()
		// As the kubelet does: a new file swapped in whole.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 100)
	notices := WatchNotices(ctx, path, 10*time.Millisecond, func(err error) { errs <- err })
	expect := func(want string) {
		t.Helper()
		select {
		case at := <-notices:
			if want == "withdrawn" && at.IsZero() {
				return
			}
			if at.IsZero() || at.Format(time.RFC3339) != want {
				t.Fatalf("notice %v, want %s", at, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no notice, want %s", want)
		}
	}
	quiet := func() {
		t.Helper()
		select {
		case at := <-notices:
			t.Fatalf("notice %v sent again", at)
		case <-time.After(100 * time.Millisecond):
		}
	}
	write(`gleaner.dev/reclaim-notice="2026-11-30T21:55:00Z"` + "\n")
	expect("2026-11-30T21:55:00Z")
	quiet()
	write(`gleaner.dev/reclaim-notice="2026-11-30T21:57:00Z"` + "\n")
	expect("2026-11-30T21:57:00Z")
	write("other=\"x\"\n")
	expect("withdrawn")
	quiet()
	write(`gleaner.dev/reclaim-notice="2026-11-30T21:57:00Z"` + "\n")
	expect("2026-11-30T21:57:00Z")
	write(`gleaner.dev/reclaim-notice=garbage` + "\n")
	select {
	case err := <-errs:
		if !strings.Contains(err.Error(), "not a quoted string") {
			t.Fatalf("error %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an unreadable notice was not reported")
	}
	quiet()
	cancel()
	for range notices { // the channel closes once the watch ends
	}
}
