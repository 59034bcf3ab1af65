// Package objstore reads and writes object storage (AWS S3 and
// S3-compatible stores, Google Cloud Storage, Azure Blob Storage) through
// one library, gocloud.dev/blob, with Triton's location syntax and
// credential sources.
//
// A location is a URI (Parse): gs://bucket/path, s3://bucket/path,
// s3://host:port/bucket/path or s3://https://host:port/bucket/path for an
// S3-compatible endpoint, as://account/container/path. Credentials come
// from Triton's credential file (TRITON_CLOUD_CREDENTIAL_PATH) or the
// usual variables (ResolveCredentials); an empty field leaves the cloud
// SDK's default chain in charge, which is how workload identity works.
//
// The API is small on purpose:
//
//	b, err := objstore.OpenURI(ctx, "s3://bucket/prefix", objstore.Options{})
//	err = b.List(ctx, "sub", func(o objstore.Object) error { ... }) // key, size, version token, MD5
//	r, err := b.NewReader(ctx, "sub/file", offset, length)          // a range, or -1 for the rest
//	w, err := b.NewWriter(ctx, "sub/file")                          // the object exists once Close returns nil
//	err = b.WriteAll(ctx, "sub/file", data)
//	err = b.Delete(ctx, "sub/file")
//	s := b.Stats()                                                   // requests made, response bytes read
//
// Keys are relative to the location's prefix. Every error a Bucket returns
// names the location and has credential values replaced by "[redacted]";
// a missing object wraps ErrNotExist.
//
// Emulators for development and tests: STORAGE_EMULATOR_HOST for GCS,
// AZURE_STORAGE_IS_LOCAL_EMULATOR=true with AZURE_STORAGE_DOMAIN=host:port
// for Azurite, an s3://host:port/... location for S3-compatible servers.
package objstore
