package objstore

import (
	"context"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"gocloud.dev/blob"
	"gocloud.dev/blob/s3blob"
)

func s3blobOpen(ctx context.Context, client *s3.Client, bucket string) (*blob.Bucket, error) {
	return s3blob.OpenBucket(ctx, client, bucket, nil)
}
