package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/gleaner-dev/gleaner/pkg/api"
)

// ReadNotice reads the reclaim notice (api.AnnotationReclaimNotice) from a
// pod's annotations as the downward API writes them to a file (one
// `key="value"` line each, the value quoted as Go quotes strings). It returns
// the expected eviction time and whether a notice stands. A missing file is
// no notice (the volume not mounted yet); a line that does not parse is an
// error naming it.
func ReadNotice(path string) (time.Time, bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		key, quoted, ok := strings.Cut(sc.Text(), "=")
		if !ok || key != api.AnnotationReclaimNotice {
			continue
		}
		value, err := strconv.Unquote(quoted)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%s: %s is not a quoted string: %q", path, key, quoted)
		}
		at, err := api.ParseTime(value)
		if err != nil {
			return time.Time{}, false, fmt.Errorf("%s: %s: %w", path, key, err)
		}
		return at, true, nil
	}
	return time.Time{}, false, sc.Err()
}

// WatchNotices reads path every interval until ctx ends and sends each change
// of notice on the channel it returns: the expected eviction time of a notice
// that appears or whose time moves, and the zero time when a notice is
// withdrawn. Read errors are passed to onError (when not nil) and change
// nothing.
func WatchNotices(ctx context.Context, path string, interval time.Duration, onError func(error)) <-chan time.Time {
	out := make(chan time.Time, 1)
	go func() {
		defer close(out)
		var last time.Time
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			at, ok, err := ReadNotice(path)
			switch {
			case err != nil:
				if onError != nil {
					onError(err)
				}
			case !ok && last.IsZero():
			case !at.Equal(last):
				last = at
				select {
				case out <- at:
				case <-ctx.Done():
					return
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return out
}
