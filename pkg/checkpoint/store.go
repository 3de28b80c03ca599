package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNotFound is returned by Store.Get for a name that is not there.
var ErrNotFound = errors.New("not found")

// Store is a flat location holding named objects: a directory or a bucket prefix.
type Store interface {
	// Put stores data under name atomically: a reader sees the old object,
	// no object, or all of data, never a part of it.
	Put(ctx context.Context, name string, data []byte) error
	// Get returns the object's bytes, or an error wrapping ErrNotFound.
	Get(ctx context.Context, name string) ([]byte, error)
	// List returns the names of the complete objects, sorted.
	List(ctx context.Context) ([]string, error)
	Delete(ctx context.Context, name string) error
	// String names the location for messages, e.g. s3://bucket/prefix.
	String() string
}

// Open returns the store for a location: "s3://bucket/prefix" for an
// S3-compatible bucket (endpoint and credentials from the environment, see
// S3ConfigFromEnv), or a directory path (optionally "file://...") otherwise.
func Open(location string) (Store, error) {
	if location == "" {
		return nil, fmt.Errorf("empty storage location: pass a directory or s3://bucket/prefix")
	}
	if strings.HasPrefix(location, "s3://") {
		cfg, err := S3ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return OpenS3(location, cfg)
	}
	if strings.HasPrefix(location, "file://") {
		u, err := url.Parse(location)
		if err != nil {
			return nil, fmt.Errorf("parsing storage location %q: %w", location, err)
		}
		location = u.Path
	} else if i := strings.Index(location, "://"); i > 0 {
		return nil, fmt.Errorf("storage location %q: scheme %q is not supported; use a directory or s3://bucket/prefix", location, location[:i])
	}
	return NewDirStore(location)
}

// tmpPrefix marks files being written; List never returns them.
const tmpPrefix = ".tmp-"

// DirStore keeps objects as files in one directory.
type DirStore struct {
	dir string
}

// staleTemp is how old a temporary file must be before a new store removes
// it. A write in flight is younger: an evicted pod writing its last
// checkpoint within its grace period while its replacement starts on the same
// location must not lose it.
const staleTemp = 15 * time.Minute

// NewDirStore creates dir if needed and removes temporary files left by a
// writer that was killed mid-write, once they are older than any write still
// in flight could be.
func NewDirStore(dir string) (*DirStore, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating storage directory: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("reading storage directory: %w", err)
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), tmpPrefix) {
			continue
		}
		if info, err := e.Info(); err == nil && time.Since(info.ModTime()) > staleTemp {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
	return &DirStore{dir: dir}, nil
}

func (d *DirStore) String() string { return d.dir }

// Put writes to a temporary file in the same directory, syncs it, renames it
// over name and syncs the directory, so after a crash either the old or the
// new file is there, whole.
func (d *DirStore) Put(_ context.Context, name string, data []byte) (err error) {
	if err := checkName(name); err != nil {
		return err
	}
	f, err := os.CreateTemp(d.dir, tmpPrefix+name+"-*")
	if err != nil {
		return fmt.Errorf("creating temporary file in %s: %w", d.dir, err)
	}
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(f.Name())
		}
	}()
	// CreateTemp makes the file private; other stages (other users) read it.
	if err = f.Chmod(0o644); err != nil {
		return fmt.Errorf("setting permissions on %s: %w", f.Name(), err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("writing %s: %w", f.Name(), err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("syncing %s: %w", f.Name(), err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", f.Name(), err)
	}
	if err = os.Rename(f.Name(), filepath.Join(d.dir, name)); err != nil {
		return fmt.Errorf("renaming %s into place: %w", f.Name(), err)
	}
	return syncDir(d.dir)
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("opening %s to sync it: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("syncing directory %s: %w", dir, err)
	}
	return nil
}

func (d *DirStore) Get(_ context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(d.dir, name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s/%s: %w", d.dir, name, ErrNotFound)
	}
	return data, err
}

func (d *DirStore) List(_ context.Context) ([]string, error) {
	entries, err := os.ReadDir(d.dir)
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", d.dir, err)
	}
	var names []string
	for _, e := range entries {
		if e.Type().IsRegular() && !strings.HasPrefix(e.Name(), tmpPrefix) {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names, nil
}

func (d *DirStore) Delete(_ context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := os.Remove(filepath.Join(d.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// checkName keeps object names flat so a store never writes outside its location.
func checkName(name string) error {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." || strings.HasPrefix(name, tmpPrefix) {
		return fmt.Errorf("invalid object name %q: must be a plain file name", name)
	}
	return nil
}
