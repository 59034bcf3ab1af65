package objstore_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/objstore"
	"github.com/sluice-ml/sluice/internal/objstore/objstoretest"
)

func TestParse(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want objstore.Location
		back string // String(), when it differs from in
	}{
		{in: "gs://bucket/a/b", want: objstore.Location{Scheme: "gs", Bucket: "bucket", Prefix: "a/b"}},
		{in: "gs://bucket", want: objstore.Location{Scheme: "gs", Bucket: "bucket"}},
		{in: "s3://bucket/models/", want: objstore.Location{Scheme: "s3", Bucket: "bucket", Prefix: "models"}, back: "s3://bucket/models"},
		{in: "s3://127.0.0.1:9000/bucket/m", want: objstore.Location{Scheme: "s3", Endpoint: "http://127.0.0.1:9000", Bucket: "bucket", Prefix: "m"}},
		{in: "s3://https://minio.local:9000/bucket/m", want: objstore.Location{Scheme: "s3", Endpoint: "https://minio.local:9000", Bucket: "bucket", Prefix: "m"}},
		{in: "s3://http://minio.local:9000/bucket", want: objstore.Location{Scheme: "s3", Endpoint: "http://minio.local:9000", Bucket: "bucket"}, back: "s3://minio.local:9000/bucket"},
		// Without a port, an HTTP endpoint keeps its scheme: "minio.local"
		// alone would read back as the bucket.
		{in: "s3://http://minio.local/bucket", want: objstore.Location{Scheme: "s3", Endpoint: "http://minio.local", Bucket: "bucket"}},
		{in: "as://account/container/path/x", want: objstore.Location{Scheme: "as", Account: "account", Bucket: "container", Prefix: "path/x"}},
	} {
		t.Run(tt.in, func(t *testing.T) {
			got, err := objstore.Parse(tt.in)
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
			back := tt.back
			if back == "" {
				back = tt.in
			}
			require.Equal(t, back, got.String())
			again, err := objstore.Parse(got.String())
			require.NoError(t, err)
			require.Equal(t, got, again)
		})
	}
	for _, bad := range []string{
		"/local/path", "gs://", "s3:///x", "as://account", "as://account/", "s3://user:secret@host:9000/b",
		"gs://b/../x", "gs://b//x", "s3://host:port/b", "s3://https:///b", "gs://b?x=1",
	} {
		t.Run("bad "+bad, func(t *testing.T) {
			_, err := objstore.Parse(bad)
			require.Error(t, err)
			require.NotContains(t, err.Error(), "secret@", "the message must not repeat user information")
		})
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"gs://b/p", "s3://h:1/b/p", "s3://https://h:1/b", "as://a/c/p", "s3://b", "s3://a@b/c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		loc, err := objstore.Parse(s)
		if err != nil {
			return
		}
		again, err := objstore.Parse(loc.String())
		if err != nil {
			t.Fatalf("%q parsed, but its String %q does not: %v", s, loc.String(), err)
		}
		if again != loc {
			t.Fatalf("%q: %+v, after String %+v", s, loc, again)
		}
		if strings.Contains(loc.String(), "@") {
			t.Fatalf("%q: location %q has user information", s, loc.String())
		}
	})
}

// FuzzWithEndpoint: an endpoint override (Feast's s3_endpoint_override,
// from a feature repository) either is refused or gives a location that
// parses back the same and shows no user information.
func FuzzWithEndpoint(f *testing.F) {
	for _, s := range []string{"http://127.0.0.1:9000", "https://minio.local", "h:1", "http://u:p@h:1", "https://h:x", "http://", "h"} {
		f.Add("s3://bucket/data/x.parquet", s)
	}
	f.Fuzz(func(t *testing.T, uri, endpoint string) {
		loc, err := objstore.Parse(uri)
		if err != nil {
			return
		}
		with, err := loc.WithEndpoint(endpoint)
		if err != nil {
			// User information ("key:secret@host") is never repeated.
			if user, _, ok := strings.Cut(endpoint, "@"); ok && len(user) >= 4 && strings.Contains(err.Error(), user) {
				t.Fatalf("error %q repeats the user information of %q", err, endpoint)
			}
			return
		}
		again, err := objstore.Parse(with.String())
		if err != nil {
			t.Fatalf("%q with %q: %q does not parse: %v", uri, endpoint, with.String(), err)
		}
		if again != with {
			t.Fatalf("%q with %q: %+v, after String %+v", uri, endpoint, with, again)
		}
		if strings.Contains(with.String(), "@") {
			t.Fatalf("%q with %q: location %q has user information", uri, endpoint, with.String())
		}
	})
}

func TestResolveCredentials(t *testing.T) {
	env := map[string]string{
		"AWS_ACCESS_KEY_ID": "envkey", "AWS_SECRET_ACCESS_KEY": "envsecret", "AWS_DEFAULT_REGION": "eu-west-1",
		"AZURE_STORAGE_ACCOUNT": "acct", "AZURE_STORAGE_KEY": "azkey==", "GOOGLE_APPLICATION_CREDENTIALS": "/etc/g.json",
	}
	getenv := func(k string) string { return env[k] }
	loc := func(s string) objstore.Location {
		l, err := objstore.Parse(s)
		require.NoError(t, err)
		return l
	}
	c, err := objstore.ResolveCredentials(loc("s3://b/p"), getenv)
	require.NoError(t, err)
	require.Equal(t, objstore.Credentials{KeyID: "envkey", SecretKey: "envsecret", Region: "eu-west-1"}, c)
	c, err = objstore.ResolveCredentials(loc("as://acct/c"), getenv)
	require.NoError(t, err)
	require.Equal(t, objstore.Credentials{AzureAccount: "acct", AzureKey: "azkey=="}, c)
	c, err = objstore.ResolveCredentials(loc("gs://b"), getenv)
	require.NoError(t, err)
	require.Equal(t, "/etc/g.json", c.GoogleCredentialsFile)

	// Triton's credential file: the longest matching prefix wins; a
	// location it has no entry for reads the environment.
	file := filepath.Join(t.TempDir(), "cloud_credential.json")
	require.NoError(t, os.WriteFile(file, []byte(`{
	  "gs": {"": "/etc/default.json", "gs://special": "/etc/special.json"},
	  "s3": {"": {"secret_key": "s0", "key_id": "k0", "region": "r0", "session_token": "", "profile": ""},
	         "s3://b2": {"secret_key": "s2", "key_id": "k2", "region": "r2", "session_token": "t2", "profile": ""}},
	  "as": {"as://acct/onlythis": {"account_str": "acct", "account_key": "filekey"}}
	}`), 0o600))
	env["TRITON_CLOUD_CREDENTIAL_PATH"] = file
	c, err = objstore.ResolveCredentials(loc("s3://b2/models"), getenv)
	require.NoError(t, err)
	require.Equal(t, objstore.Credentials{KeyID: "k2", SecretKey: "s2", SessionToken: "t2", Region: "r2"}, c)
	c, err = objstore.ResolveCredentials(loc("s3://other"), getenv)
	require.NoError(t, err)
	require.Equal(t, "k0", c.KeyID)
	c, err = objstore.ResolveCredentials(loc("gs://special/x"), getenv)
	require.NoError(t, err)
	require.Equal(t, "/etc/special.json", c.GoogleCredentialsFile)
	c, err = objstore.ResolveCredentials(loc("as://acct/onlythis/m"), getenv)
	require.NoError(t, err)
	require.Equal(t, "filekey", c.AzureKey)
	c, err = objstore.ResolveCredentials(loc("as://acct/elsewhere"), getenv)
	require.NoError(t, err)
	require.Equal(t, "azkey==", c.AzureKey, "no entry in the file: the environment")

	// A broken file is named, its content is not repeated.
	require.NoError(t, os.WriteFile(file, []byte(`{"s3": {"": {"secret_key": "leakme"`), 0o600))
	_, err = objstore.ResolveCredentials(loc("s3://b"), getenv)
	require.ErrorContains(t, err, file)
	require.NotContains(t, err.Error(), "leakme")

	require.NotContains(t, objstore.Credentials{KeyID: "kkkk", SecretKey: "ssss"}.String(), "ssss")
	require.Equal(t, "x [redacted] y", objstore.Credentials{SecretKey: "ssss"}.Redact("x ssss y"))
}

// TestBuckets writes, lists, reads ranges of and deletes objects on each
// real server.
func TestBuckets(t *testing.T) {
	for _, tt := range []struct {
		name  string
		start func(testing.TB) *objstoretest.Server
	}{
		{"s3", objstoretest.StartS3},
		{"gcs", objstoretest.StartGCS},
		{"azure", objstoretest.StartAzurite},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := tt.start(t)
			b := srv.Open(t, "repo")
			ctx := t.Context()
			data := bytes.Repeat([]byte("0123456789"), 1000)
			require.NoError(t, b.WriteAll(ctx, "m/1/model.onnx", data))
			w, err := b.NewWriter(ctx, "m/config.pbtxt")
			require.NoError(t, err)
			_, err = io.WriteString(w, `name: "m"`)
			require.NoError(t, err)
			require.NoError(t, w.Close())
			// Outside the location: not listed.
			require.NoError(t, srv.Open(t, "").WriteAll(ctx, "elsewhere/x", []byte("x")))

			var got []objstore.Object
			require.NoError(t, b.List(ctx, "", func(o objstore.Object) error { got = append(got, o); return nil }))
			require.Len(t, got, 2)
			require.Equal(t, "m/1/model.onnx", got[0].Key)
			require.Equal(t, int64(len(data)), got[0].Size)
			require.NotEmpty(t, got[0].Version)
			require.Equal(t, "m/config.pbtxt", got[1].Key)

			var under []string
			require.NoError(t, b.List(ctx, "m/1", func(o objstore.Object) error { under = append(under, o.Key); return nil }))
			require.Equal(t, []string{"m/1/model.onnx"}, under)

			r, err := b.NewReader(ctx, "m/1/model.onnx", 5, 7)
			require.NoError(t, err)
			part, err := io.ReadAll(r)
			require.NoError(t, err)
			require.NoError(t, r.Close())
			require.Equal(t, "5678901", string(part))

			// Rewriting an object changes its version.
			require.NoError(t, b.WriteAll(ctx, "m/1/model.onnx", []byte("new")))
			var v2 string
			require.NoError(t, b.List(ctx, "m/1", func(o objstore.Object) error { v2 = o.Version; return nil }))
			require.NotEqual(t, got[0].Version, v2)

			require.NoError(t, b.Delete(ctx, "m/config.pbtxt"))
			_, err = b.ReadAll(ctx, "m/config.pbtxt")
			require.True(t, errors.Is(err, objstore.ErrNotExist), "got %v", err)
			require.Positive(t, b.Stats().Requests)

			for _, s := range srv.Secrets {
				require.NotContains(t, err.Error(), s)
			}
		})
	}
}

// TestErrorsHideCredentials: a store that is down gives an error that
// names the location and never a credential.
func TestErrorsHideCredentials(t *testing.T) {
	srv := objstoretest.StartS3(t)
	b := srv.Open(t, "repo")
	srv.Stop()
	err := b.List(t.Context(), "", func(objstore.Object) error { return nil })
	require.Error(t, err)
	require.Contains(t, err.Error(), srv.URI("repo"))
	for _, s := range srv.Secrets {
		require.NotContains(t, err.Error(), s)
	}
}

// FuzzCredentialFile: any credential file content gives credentials or an
// error that does not repeat the content.
func FuzzCredentialFile(f *testing.F) {
	f.Add([]byte(`{"s3": {"": {"key_id": "k", "secret_key": "s"}}}`))
	f.Add([]byte(`{"gs": {"gs://b": "/p"}, "as": {"": {"account_str": "a", "account_key": "k"}}}`))
	f.Add([]byte(`{"s3": []}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		file := filepath.Join(t.TempDir(), "c.json")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			if k == objstore.CredentialFileEnv {
				return file
			}
			return ""
		}
		for _, uri := range []string{"s3://b/p", "gs://b/p", "as://a/c/p"} {
			loc, _ := objstore.Parse(uri)
			_, err := objstore.ResolveCredentials(loc, getenv)
			if err != nil && len(data) > 8 && strings.Contains(err.Error(), string(data)) {
				t.Fatalf("error %q repeats the file", err)
			}
		}
	})
}

// TestCredentialFileOpensAzurite: Triton's credential file alone (no key
// in the environment) opens a store that checks its key (Azurite), and a
// wrong key is refused without showing it.
func TestCredentialFileOpensAzurite(t *testing.T) {
	srv := objstoretest.StartAzurite(t)
	uri := srv.URI("repo")
	loc, err := objstore.Parse(uri)
	require.NoError(t, err)
	open := func(key string) error {
		file := filepath.Join(t.TempDir(), "cloud_credential.json")
		require.NoError(t, os.WriteFile(file, []byte(`{"as": {"as://`+loc.Account+`": {"account_str": "`+loc.Account+`", "account_key": "`+key+`"}}}`), 0o600))
		getenv := func(k string) string {
			switch k {
			case "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT":
				return ""
			case objstore.CredentialFileEnv:
				return file
			}
			return srv.Getenv(k)
		}
		b, err := objstore.OpenURI(t.Context(), uri, objstore.Options{Getenv: getenv})
		require.NoError(t, err)
		defer b.Close()
		return b.WriteAll(t.Context(), "x", []byte("x"))
	}
	require.NoError(t, open(srv.Getenv("AZURE_STORAGE_KEY")))
	wrong := "d3JvbmdrZXl3cm9uZ2tleXdyb25na2V5d3Jvbmdr"
	err = open(wrong)
	require.Error(t, err, "a wrong key must be refused")
	require.NotContains(t, err.Error(), wrong)
	require.NotContains(t, err.Error(), srv.Getenv("AZURE_STORAGE_KEY"))
}
