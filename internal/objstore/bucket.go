package objstore

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"cloud.google.com/go/storage"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/azcore/policy"
	"github.com/Azure/azure-sdk-for-go/sdk/azidentity"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	awscreds "github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	s3types "github.com/aws/aws-sdk-go-v2/service/s3/types"
	"gocloud.dev/blob"
	"gocloud.dev/blob/azureblob"
	"gocloud.dev/blob/gcsblob"
	"gocloud.dev/gcerrors"
	"golang.org/x/oauth2/google"
	"google.golang.org/api/option"
)

// ErrNotExist is returned (wrapped) when an object does not exist.
var ErrNotExist = errors.New("object does not exist")

// Object is one object of a listing.
type Object struct {
	// Key is the object's path relative to the bucket's location.
	Key string
	// Size is its length in bytes.
	Size int64
	// ModTime is when it was last written.
	ModTime time.Time
	// Version changes whenever the object's content may have changed: the
	// GCS generation, or the S3 or Azure ETag; the size, modification time
	// and MD5 where the store gives neither.
	Version string
	// MD5 is the content's MD5 when the store reports one, else nil.
	MD5 []byte
}

// Stats counts the HTTP requests a Bucket made and the response bytes it
// read, for poll-cost measurements.
type Stats struct {
	Requests  int64
	BytesRead int64
}

// Bucket is an opened location. Its methods are safe for concurrent use.
// Every error it returns has credential values removed.
type Bucket struct {
	loc     Location
	creds   Credentials
	b       *blob.Bucket
	closeFn func() error // closes clients the bucket does not own
	counter *countingTransport
}

// Options tune Open.
type Options struct {
	// Getenv reads the environment (credentials, emulator hosts);
	// os.Getenv when nil.
	Getenv func(string) string
	// Timeout bounds each HTTP request's wait for response headers; 0
	// means 30s.
	Timeout time.Duration
}

// OpenURI parses uri and opens it, with credentials from the environment
// and Triton's credential file.
func OpenURI(ctx context.Context, uri string, opts Options) (*Bucket, error) {
	loc, err := Parse(uri)
	if err != nil {
		return nil, err
	}
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	creds, err := ResolveCredentials(loc, getenv)
	if err != nil {
		return nil, err
	}
	return Open(ctx, loc, creds, opts)
}

// Open opens loc with creds. Opening does not contact the store: a wrong
// bucket or credential shows at the first List or read.
func Open(ctx context.Context, loc Location, creds Credentials, opts Options) (*Bucket, error) {
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	base := http.DefaultTransport.(*http.Transport).Clone()
	base.ResponseHeaderTimeout = timeout
	ct := &countingTransport{next: base}
	bk := &Bucket{loc: loc, creds: creds, counter: ct}
	var err error
	switch loc.Scheme {
	case SchemeS3:
		bk.b, err = openS3(ctx, loc, creds, ct, timeout)
	case SchemeGCS:
		bk.b, bk.closeFn, err = openGCS(ctx, loc, creds, ct, getenv)
	case SchemeAzure:
		bk.b, err = openAzure(ctx, loc, creds, ct, getenv)
	default:
		err = fmt.Errorf("unknown scheme %q", loc.Scheme)
	}
	if err != nil {
		return nil, bk.wrap(fmt.Sprintf("open %s", loc), err)
	}
	return bk, nil
}

func openS3(ctx context.Context, loc Location, c Credentials, ct *countingTransport, timeout time.Duration) (*blob.Bucket, error) {
	region := c.Region
	if region == "" {
		region = "us-east-1"
	}
	lo := []func(*awsconfig.LoadOptions) error{
		awsconfig.WithRegion(region),
		// The SDK's own client, so that AWS_CA_BUNDLE still applies.
		awsconfig.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
			tr.ResponseHeaderTimeout = timeout
		})),
		// S3-compatible stores do not all know the newer checksums.
		awsconfig.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		awsconfig.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if c.KeyID != "" || c.SecretKey != "" {
		lo = append(lo, awsconfig.WithCredentialsProvider(awscreds.NewStaticCredentialsProvider(c.KeyID, c.SecretKey, c.SessionToken)))
	}
	if c.Profile != "" {
		lo = append(lo, awsconfig.WithSharedConfigProfile(c.Profile))
	}
	cfg, err := awsconfig.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return nil, err
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.HTTPClient = &countingDoer{next: o.HTTPClient, ct: ct}
		if loc.Endpoint != "" {
			o.BaseEndpoint = aws.String(loc.Endpoint)
			o.UsePathStyle = true
		}
	})
	return s3blobOpen(ctx, client, loc.Bucket)
}

func openGCS(ctx context.Context, loc Location, c Credentials, rt http.RoundTripper, getenv func(string) string) (*blob.Bucket, func() error, error) {
	var copts []option.ClientOption
	if host := getenv("STORAGE_EMULATOR_HOST"); host != "" {
		// The emulator takes no credentials.
		host = strings.TrimPrefix(strings.TrimPrefix(host, "http://"), "https://")
		copts = append(copts,
			option.WithEndpoint("http://"+host+"/storage/v1/"),
			option.WithHTTPClient(&http.Client{Transport: rt}))
	} else {
		var creds *google.Credentials
		var err error
		if c.GoogleCredentialsFile != "" {
			data, rerr := os.ReadFile(c.GoogleCredentialsFile)
			if rerr != nil {
				return nil, nil, fmt.Errorf("read google credentials file: %w", rerr)
			}
			creds, err = google.CredentialsFromJSON(ctx, data, storage.ScopeReadWrite) //nolint:staticcheck // the file is the operator's own
			if err != nil {
				return nil, nil, errors.New("google credentials file is not a valid credentials file")
			}
		} else if creds, err = google.FindDefaultCredentials(ctx, storage.ScopeReadWrite); err != nil {
			return nil, nil, fmt.Errorf("find google default credentials: %w", err)
		}
		hc := &http.Client{Transport: &oauthTransport{src: creds.TokenSource, next: rt}}
		copts = append(copts, option.WithHTTPClient(hc))
	}
	client, err := storage.NewClient(ctx, copts...)
	if err != nil {
		return nil, nil, err
	}
	b, err := gcsblob.OpenBucket(ctx, nil, loc.Bucket, &gcsblob.Options{Client: client})
	if err != nil {
		_ = client.Close()
		return nil, nil, err
	}
	return b, client.Close, nil
}

func openAzure(ctx context.Context, loc Location, c Credentials, rt http.RoundTripper, getenv func(string) string) (*blob.Bucket, error) {
	account := loc.Account
	var svc string
	if v, _ := strconv.ParseBool(getenv("AZURE_STORAGE_IS_LOCAL_EMULATOR")); v {
		domain := getenv("AZURE_STORAGE_DOMAIN")
		if domain == "" {
			domain = "127.0.0.1:10000"
		}
		svc = "http://" + domain + "/" + account
	} else {
		domain := getenv("AZURE_STORAGE_DOMAIN")
		if domain == "" {
			domain = "blob.core.windows.net"
		}
		svc = "https://" + account + "." + domain
	}
	curl := svc + "/" + loc.Bucket
	copts := &container.ClientOptions{ClientOptions: azcore.ClientOptions{
		Transport: &http.Client{Transport: rt},
		Retry:     policy.RetryOptions{MaxRetries: 2},
	}}
	var client *container.Client
	var err error
	switch {
	case c.AzureKey != "":
		if c.AzureAccount != "" && !strings.EqualFold(c.AzureAccount, account) {
			return nil, fmt.Errorf("the azure key is for account %q, not %q", c.AzureAccount, account)
		}
		cred, cerr := container.NewSharedKeyCredential(account, c.AzureKey)
		if cerr != nil {
			return nil, errors.New("azure storage key is not valid base64")
		}
		client, err = container.NewClientWithSharedKeyCredential(curl, cred, copts)
	default:
		cred, cerr := azidentity.NewDefaultAzureCredential(nil)
		if cerr != nil {
			return nil, fmt.Errorf("azure default credentials: %w", cerr)
		}
		client, err = container.NewClient(curl, cred, copts)
	}
	if err != nil {
		return nil, err
	}
	return azureblob.OpenBucket(ctx, client, nil)
}

// Location returns the location the bucket was opened at.
func (b *Bucket) Location() Location { return b.loc }

// Stats returns the requests made and bytes read so far.
func (b *Bucket) Stats() Stats {
	return Stats{Requests: b.counter.requests.Load(), BytesRead: b.counter.bytes.Load()}
}

// List calls fn for every object under prefix (relative to the bucket's
// location; "" for all), recursively, in key order. Folder markers (keys
// ending in "/") are skipped. It stops at the first error fn returns.
func (b *Bucket) List(ctx context.Context, prefix string, fn func(Object) error) error {
	full := b.loc.key(prefix)
	if full != "" && !strings.HasSuffix(full, "/") {
		full += "/"
	}
	it := b.b.List(&blob.ListOptions{Prefix: full})
	for {
		o, err := it.Next(ctx)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return b.wrap("list "+b.loc.Join(prefix).String(), err)
		}
		if o.IsDir || strings.HasSuffix(o.Key, "/") {
			continue
		}
		rel := strings.TrimPrefix(o.Key, full)
		if err := fn(Object{Key: strings.TrimPrefix(prefix+"/"+rel, "/"), Size: o.Size, ModTime: o.ModTime, MD5: o.MD5, Version: version(o)}); err != nil {
			return err
		}
	}
}

// version returns a change token for a listed object.
func version(o *blob.ListObject) string {
	var s3o s3types.Object
	if o.As(&s3o) && s3o.ETag != nil {
		return "etag:" + strings.Trim(*s3o.ETag, `"`)
	}
	var ga storage.ObjectAttrs
	if o.As(&ga) && ga.Generation != 0 {
		return "gen:" + strconv.FormatInt(ga.Generation, 10)
	}
	var ab container.BlobItem
	if o.As(&ab) && ab.Properties != nil && ab.Properties.ETag != nil {
		return "etag:" + strings.Trim(string(*ab.Properties.ETag), `"`)
	}
	return fmt.Sprintf("meta:%d:%d:%s", o.Size, o.ModTime.UnixNano(), hex.EncodeToString(o.MD5))
}

// NewReader opens the object at key for reading from offset, at most
// length bytes (length < 0: to the end).
func (b *Bucket) NewReader(ctx context.Context, key string, offset, length int64) (io.ReadCloser, error) {
	r, err := b.b.NewRangeReader(ctx, b.loc.key(key), offset, length, nil)
	if err != nil {
		return nil, b.wrap("read "+b.loc.Join(key).String(), err)
	}
	return &reader{r: r, b: b, key: key}, nil
}

type reader struct {
	r   *blob.Reader
	b   *Bucket
	key string
}

func (r *reader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = r.b.wrap("read "+r.b.loc.Join(r.key).String(), err)
	}
	return n, err
}

func (r *reader) Close() error { return r.r.Close() }

// ReadAll reads a whole object.
func (b *Bucket) ReadAll(ctx context.Context, key string) ([]byte, error) {
	r, err := b.NewReader(ctx, key, 0, -1)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// NewWriter writes the object at key; the object exists, whole, once Close
// returns nil. Cancel ctx to abandon the write.
func (b *Bucket) NewWriter(ctx context.Context, key string) (io.WriteCloser, error) {
	w, err := b.b.NewWriter(ctx, b.loc.key(key), nil)
	if err != nil {
		return nil, b.wrap("write "+b.loc.Join(key).String(), err)
	}
	return &writer{w: w, b: b, key: key}, nil
}

type writer struct {
	w   *blob.Writer
	b   *Bucket
	key string
}

func (w *writer) Write(p []byte) (int, error) {
	n, err := w.w.Write(p)
	if err != nil {
		err = w.b.wrap("write "+w.b.loc.Join(w.key).String(), err)
	}
	return n, err
}

func (w *writer) Close() error {
	if err := w.w.Close(); err != nil {
		return w.b.wrap("write "+w.b.loc.Join(w.key).String(), err)
	}
	return nil
}

// WriteAll writes a whole object.
func (b *Bucket) WriteAll(ctx context.Context, key string, data []byte) error {
	if err := b.b.WriteAll(ctx, b.loc.key(key), data, nil); err != nil {
		return b.wrap("write "+b.loc.Join(key).String(), err)
	}
	return nil
}

// Delete removes the object at key.
func (b *Bucket) Delete(ctx context.Context, key string) error {
	if err := b.b.Delete(ctx, b.loc.key(key)); err != nil {
		return b.wrap("delete "+b.loc.Join(key).String(), err)
	}
	return nil
}

// Close releases the bucket's clients.
func (b *Bucket) Close() error {
	err := b.b.Close()
	if b.closeFn != nil {
		err = errors.Join(err, b.closeFn())
	}
	return err
}

// wrap adds what was done to an error, maps not-found to ErrNotExist and
// removes credential values.
func (b *Bucket) wrap(what string, err error) error {
	if gcerrors.Code(err) == gcerrors.NotFound {
		err = fmt.Errorf("%w: %w", ErrNotExist, err)
	}
	return &redactedError{err: fmt.Errorf("%s: %w", what, err), creds: b.creds}
}

// countingTransport counts requests and response bytes.
type countingTransport struct {
	next     http.RoundTripper
	requests atomic.Int64
	bytes    atomic.Int64
}

func (t *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.requests.Add(1)
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &t.bytes}
	return resp, nil
}

// countingDoer counts for clients that take a Do method.
type countingDoer struct {
	next interface {
		Do(*http.Request) (*http.Response, error)
	}
	ct *countingTransport
}

func (d *countingDoer) Do(r *http.Request) (*http.Response, error) {
	d.ct.requests.Add(1)
	resp, err := d.next.Do(r)
	if err != nil {
		return nil, err
	}
	resp.Body = &countingBody{ReadCloser: resp.Body, n: &d.ct.bytes}
	return resp, nil
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (c *countingBody) Read(p []byte) (int, error) {
	n, err := c.ReadCloser.Read(p)
	c.n.Add(int64(n))
	return n, err
}
