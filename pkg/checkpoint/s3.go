package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// S3Config says how to reach an S3-compatible service.
type S3Config struct {
	// Endpoint is host[:port], without a scheme.
	Endpoint string
	// Secure selects HTTPS.
	Secure bool
	Region string
	Creds  *credentials.Credentials
}

// S3ConfigFromEnv reads the variables the AWS tools use: AWS_ENDPOINT_URL_S3 or
// AWS_ENDPOINT_URL (e.g. http://minio.storage:9000; default AWS S3 over HTTPS),
// AWS_REGION or AWS_DEFAULT_REGION, and credentials from AWS_ACCESS_KEY_ID /
// AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN, MINIO_ACCESS_KEY / MINIO_SECRET_KEY,
// or the pod's IAM role (including a web-identity token) in that order.
func S3ConfigFromEnv() (S3Config, error) {
	cfg := S3Config{Endpoint: "s3.amazonaws.com", Secure: true}
	if raw := firstEnv("AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL"); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
			return S3Config{}, fmt.Errorf("S3 endpoint %q (from AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) is not an http(s)://host[:port] URL", raw)
		}
		cfg.Endpoint, cfg.Secure = u.Host, u.Scheme == "https"
	}
	cfg.Region = firstEnv("AWS_REGION", "AWS_DEFAULT_REGION")
	cfg.Creds = credentials.NewChainCredentials([]credentials.Provider{
		&credentials.EnvAWS{},
		&credentials.EnvMinio{},
		&credentials.IAM{},
	})
	return cfg, nil
}

func firstEnv(names ...string) string {
	for _, n := range names {
		if v := os.Getenv(n); v != "" {
			return v
		}
	}
	return ""
}

// S3Store keeps objects under a prefix of a bucket. A single PUT is atomic in
// S3, so no temporary object is needed: a reader sees the whole object or none.
type S3Store struct {
	client *minio.Client
	bucket string
	prefix string // "" or ending in "/"
}

// OpenS3 opens location "s3://bucket[/prefix]" with cfg. The bucket must exist.
func OpenS3(location string, cfg S3Config) (*S3Store, error) {
	u, err := url.Parse(location)
	if err != nil || u.Scheme != "s3" || u.Host == "" {
		return nil, fmt.Errorf("storage location %q is not of the form s3://bucket/prefix", location)
	}
	prefix := strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	client, err := minio.New(cfg.Endpoint, &minio.Options{
		Creds:  cfg.Creds,
		Secure: cfg.Secure,
		Region: cfg.Region,
	})
	if err != nil {
		return nil, fmt.Errorf("S3 client for endpoint %s: %w", cfg.Endpoint, err)
	}
	return &S3Store{client: client, bucket: u.Host, prefix: prefix}, nil
}

func (s *S3Store) String() string { return "s3://" + s.bucket + "/" + s.prefix }

func (s *S3Store) Put(ctx context.Context, name string, data []byte) error {
	if err := checkName(name); err != nil {
		return err
	}
	// Content-MD5 lets the server refuse a body damaged in transit.
	_, err := s.client.PutObject(ctx, s.bucket, s.prefix+name, bytes.NewReader(data), int64(len(data)),
		minio.PutObjectOptions{ContentType: "application/octet-stream", SendContentMd5: true})
	if err != nil {
		return fmt.Errorf("uploading %s%s: %w", s, name, err)
	}
	return nil
}

func (s *S3Store) Get(ctx context.Context, name string) ([]byte, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	obj, err := s.client.GetObject(ctx, s.bucket, s.prefix+name, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("downloading %s%s: %w", s, name, err)
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		if minio.ToErrorResponse(err).Code == minio.NoSuchKey {
			return nil, fmt.Errorf("%s%s: %w", s, name, ErrNotFound)
		}
		return nil, fmt.Errorf("downloading %s%s: %w", s, name, err)
	}
	return data, nil
}

func (s *S3Store) List(ctx context.Context) ([]string, error) {
	var names []string
	for obj := range s.client.ListObjects(ctx, s.bucket, minio.ListObjectsOptions{Prefix: s.prefix}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("listing %s: %w", s, obj.Err)
		}
		// Non-recursive listing also yields "sub/" prefixes; only plain objects count.
		name := strings.TrimPrefix(obj.Key, s.prefix)
		if name != "" && !strings.HasSuffix(name, "/") && path.Base(name) == name {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names, nil
}

func (s *S3Store) Delete(ctx context.Context, name string) error {
	if err := checkName(name); err != nil {
		return err
	}
	if err := s.client.RemoveObject(ctx, s.bucket, s.prefix+name, minio.RemoveObjectOptions{}); err != nil {
		return fmt.Errorf("deleting %s%s: %w", s, name, err)
	}
	return nil
}
