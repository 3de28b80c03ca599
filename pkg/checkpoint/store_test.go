package checkpoint

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// startS3 serves an in-memory S3 implementation on loopback, so the S3 store
// is tested over the real protocol (signed requests, XML listings, MD5 checks).
func startS3(t *testing.T, bucket string) S3Config {
	t.Helper()
	backend := s3mem.New()
	if err := backend.CreateBucket(bucket); err != nil {
		t.Fatalf("creating bucket: %v", err)
	}
	srv := httptest.NewServer(gofakes3.New(backend).Server())
	t.Cleanup(srv.Close)
	u, _ := url.Parse(srv.URL)
	return S3Config{Endpoint: u.Host, Creds: credentials.NewStaticV4("test-key", "test-secret", ""), Region: "us-east-1"}
}

// stores returns one empty store of each kind.
func stores(t *testing.T) map[string]Store {
	t.Helper()
	dir, err := NewDirStore(filepath.Join(t.TempDir(), "ckpt"))
	if err != nil {
		t.Fatal(err)
	}
	s3, err := OpenS3("s3://checkpoints/wf-uid/pretrain", startS3(t, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]Store{"dir": dir, "s3": s3}
}

func TestStorePutGetListDelete(t *testing.T) {
	ctx := context.Background()
	for kind, s := range stores(t) {
		t.Run(kind, func(t *testing.T) {
			if names, err := s.List(ctx); err != nil || len(names) != 0 {
				t.Fatalf("new store lists %v, %v; want nothing", names, err)
			}
			if _, err := s.Get(ctx, "missing"); !errors.Is(err, ErrNotFound) {
				t.Fatalf("Get of a missing object: %v, want ErrNotFound", err)
			}
			for _, n := range []string{"b", "a", "c"} {
				if err := s.Put(ctx, n, []byte("v1-"+n)); err != nil {
					t.Fatalf("Put %s: %v", n, err)
				}
			}
			if err := s.Put(ctx, "a", []byte("v2-a")); err != nil {
				t.Fatalf("overwriting a: %v", err)
			}
			if got, err := s.Get(ctx, "a"); err != nil || string(got) != "v2-a" {
				t.Fatalf("Get a = %q, %v; want the overwritten value", got, err)
			}
			if err := s.Delete(ctx, "b"); err != nil {
				t.Fatal(err)
			}
			if names, err := s.List(ctx); err != nil || !slices.Equal(names, []string{"a", "c"}) {
				t.Fatalf("List = %v, %v; want [a c]", names, err)
			}
			for _, bad := range []string{"", "../escape", "sub/x", ".tmp-x"} {
				if err := s.Put(ctx, bad, nil); err == nil {
					t.Errorf("Put accepted the name %q", bad)
				}
			}
		})
	}
}

// The S3 store lists only its own prefix, so stages sharing a bucket do not
// see each other's checkpoints.
func TestS3StoreIsolatesPrefixes(t *testing.T) {
	ctx := context.Background()
	cfg := startS3(t, "shared")
	a, _ := OpenS3("s3://shared/run/pretrain", cfg)
	b, _ := OpenS3("s3://shared/run/pretrain-2", cfg)
	if err := a.Put(ctx, Name(1), []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := b.Put(ctx, Name(2), []byte("b")); err != nil {
		t.Fatal(err)
	}
	if names, _ := a.List(ctx); !slices.Equal(names, []string{Name(1)}) {
		t.Fatalf("store a lists %v, want only its own object", names)
	}
}

func TestDirStoreIgnoresAndCleansTemporaryFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ckpt")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// What a writer killed mid-write leaves behind, an hour ago.
	leftover := filepath.Join(dir, tmpPrefix+Name(50)+"-123456")
	if err := os.WriteFile(leftover, []byte("GLNCKPT1 half"), 0o644); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(leftover, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	// Another writer's write in flight: an evicted pod saving its last
	// checkpoint while its replacement opens the same location.
	inFlight := filepath.Join(dir, tmpPrefix+Name(60)+"-654321")
	if err := os.WriteFile(inFlight, []byte("GLNCKPT1 writing"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := NewDirStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("leftover temporary file still there after opening the store: %v", err)
	}
	if _, err := os.Stat(inFlight); err != nil {
		t.Fatalf("another writer's file in flight was removed: %v", err)
	}
	if err := os.WriteFile(leftover, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if names, err := s.List(context.Background()); err != nil || len(names) != 0 {
		t.Fatalf("List = %v, %v; a temporary file must never be listed", names, err)
	}
}

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	for _, loc := range []string{dir, "file://" + dir} {
		s, err := Open(loc)
		if err != nil {
			t.Fatalf("Open(%q): %v", loc, err)
		}
		if _, ok := s.(*DirStore); !ok || s.String() != dir {
			t.Fatalf("Open(%q) = %T %s, want a DirStore at %s", loc, s, s, dir)
		}
	}
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
	s, err := Open("s3://bucket/a/b/")
	if err != nil {
		t.Fatal(err)
	}
	if s.String() != "s3://bucket/a/b/" {
		t.Fatalf("S3 store location %s", s)
	}
	for _, bad := range []string{"", "gs://bucket/x", "s3:///nobucket"} {
		if _, err := Open(bad); err == nil {
			t.Errorf("Open(%q) succeeded", bad)
		}
	}
	t.Setenv("AWS_ENDPOINT_URL", "minio:9000")
	if _, err := Open("s3://bucket/x"); err == nil {
		t.Error("an endpoint without a scheme was accepted")
	}
}
