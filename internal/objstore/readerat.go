package objstore

import (
	"context"
	"fmt"
	"io"
	"sync"
)

// ReaderAt reads one object by ranged reads: an io.ReaderAt for formats
// that seek (Parquet), without downloading the object. Small reads are
// served from a bounded cache of aligned blocks, so that a reader walking
// page headers does not make a request per header; a read of at least a
// block goes to the store as one ranged read. Memory stays within
// BlockSize × Blocks whatever the object's size.
type ReaderAt struct {
	b         *Bucket
	ctx       context.Context //nolint:containedctx // io.ReaderAt takes no context; the reader lives for one scan
	key       string
	size      int64
	blockSize int64
	maxBlocks int

	mu     sync.Mutex // protects blocks, tick
	blocks map[int64]*cachedBlock
	tick   int64
}

type cachedBlock struct {
	data []byte
	used int64
}

// ReaderAtOptions tune NewReaderAt.
type ReaderAtOptions struct {
	// BlockSize is the cache's block (and smallest request) size; 0 means
	// 256 KiB.
	BlockSize int64
	// Blocks is how many blocks the cache keeps; 0 means 16.
	Blocks int
}

// NewReaderAt returns a ReaderAt over the object at key, whose size the
// caller knows (from List or Attributes). Reads use ctx.
func (b *Bucket) NewReaderAt(ctx context.Context, key string, size int64, opts ReaderAtOptions) *ReaderAt {
	if opts.BlockSize <= 0 {
		opts.BlockSize = 256 << 10
	}
	if opts.Blocks <= 0 {
		opts.Blocks = 16
	}
	return &ReaderAt{b: b, ctx: ctx, key: key, size: size, blockSize: opts.BlockSize, maxBlocks: opts.Blocks, blocks: map[int64]*cachedBlock{}}
}

// Size returns the object's size.
func (r *ReaderAt) Size() int64 { return r.size }

// ReadAt reads len(p) bytes at off, like io.ReaderAt.
func (r *ReaderAt) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s: negative offset", r.b.loc.Join(r.key))
	}
	if off >= r.size {
		return 0, io.EOF
	}
	want := p
	var short bool
	if rest := r.size - off; int64(len(want)) > rest {
		want, short = want[:rest], true
	}
	var n int
	var err error
	if int64(len(want)) >= r.blockSize {
		n, err = r.fetch(want, off)
	} else {
		n, err = r.cached(want, off)
	}
	if err == nil && short {
		err = io.EOF
	}
	return n, err
}

// fetch reads p at off with one ranged read.
func (r *ReaderAt) fetch(p []byte, off int64) (int, error) {
	rc, err := r.b.NewReader(r.ctx, r.key, off, int64(len(p)))
	if err != nil {
		return 0, err
	}
	defer rc.Close()
	n, err := io.ReadFull(rc, p)
	if err != nil {
		return n, fmt.Errorf("read %s: %d of %d bytes at %d: %w", r.b.loc.Join(r.key), n, len(p), off, err)
	}
	return n, nil
}

// cached reads p at off through the block cache.
func (r *ReaderAt) cached(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		pos := off + int64(n)
		idx := pos / r.blockSize
		blk, err := r.block(idx)
		if err != nil {
			return n, err
		}
		n += copy(p[n:], blk[pos-idx*r.blockSize:])
	}
	return n, nil
}

// block returns block idx, reading it on a miss and evicting the least
// recently used block when the cache is full.
func (r *ReaderAt) block(idx int64) ([]byte, error) {
	r.mu.Lock()
	r.tick++
	if c, ok := r.blocks[idx]; ok {
		c.used = r.tick
		r.mu.Unlock()
		return c.data, nil
	}
	r.mu.Unlock()
	start := idx * r.blockSize
	buf := make([]byte, min(r.blockSize, r.size-start))
	if _, err := r.fetch(buf, start); err != nil {
		return nil, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.blocks) >= r.maxBlocks {
		var oldest int64 = -1
		var oldestUse int64
		for k, c := range r.blocks {
			if oldest < 0 || c.used < oldestUse {
				oldest, oldestUse = k, c.used
			}
		}
		delete(r.blocks, oldest)
	}
	r.blocks[idx] = &cachedBlock{data: buf, used: r.tick}
	return buf, nil
}

// Attributes returns the object at key's size and change token without
// reading its content.
func (b *Bucket) Attributes(ctx context.Context, key string) (Object, error) {
	a, err := b.b.Attributes(ctx, b.loc.key(key))
	if err != nil {
		return Object{}, b.wrap("stat "+b.loc.Join(key).String(), err)
	}
	return Object{Key: key, Size: a.Size, ModTime: a.ModTime, MD5: a.MD5, Version: a.ETag}, nil
}
