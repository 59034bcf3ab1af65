package modelrepo

import (
	"container/list"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Approximate bookkeeping costs counted against the cache size besides the
// tensor bytes, so that many tiny entries cannot exceed the limit by much.
const (
	cacheEntryOverhead  = 160 // key, list element, map slot
	cacheTensorOverhead = 64  // tensor header
)

// cacheKey identifies one response: sha256 over the load it came from
// (model, version and load id, so a reload never answers from its
// predecessor's entries), every input's name, data type, shape and bytes,
// and the outputs asked for, each length-prefixed so that no two
// different requests hash the same bytes.
type cacheKey [sha256.Size]byte

func newCacheKey(lv *loaded, inputs []infer.Tensor, outputs []string) cacheKey {
	h := sha256.New()
	var buf [8]byte
	num := func(v uint64) {
		binary.LittleEndian.PutUint64(buf[:], v)
		h.Write(buf[:])
	}
	str := func(s string) {
		num(uint64(len(s)))
		h.Write([]byte(s))
	}
	str(lv.model)
	num(uint64(lv.version))
	num(lv.id)
	num(uint64(len(inputs)))
	for _, t := range inputs {
		writeTensorKey(h, num, str, t)
	}
	num(uint64(len(outputs)))
	for _, o := range outputs {
		str(o)
	}
	var k cacheKey
	h.Sum(k[:0])
	return k
}

func writeTensorKey(h hash.Hash, num func(uint64), str func(string), t infer.Tensor) {
	str(t.Name)
	num(uint64(t.DataType))
	num(uint64(len(t.Shape)))
	for _, d := range t.Shape {
		num(uint64(d))
	}
	num(uint64(len(t.Data)))
	h.Write(t.Data)
}

// cacheEntry is one cached response.
type cacheEntry struct {
	key     cacheKey
	owner   uint64 // id of the loaded version that computed it
	outputs []infer.Tensor
	size    int64
}

// responseCache is the server-wide response cache: least recently used
// entries are evicted once the entries' bytes exceed the limit. It owns
// copies of what it stores and hands out copies, so neither side can
// change the other's data.
type responseCache struct {
	limit     int64
	bytes     prometheus.Gauge
	evictions prometheus.Counter

	mu    sync.Mutex // protects items, lru and used
	items map[cacheKey]*list.Element
	lru   list.List // of *cacheEntry; front = most recently used
	used  int64
}

func newResponseCache(limit int64, bytes prometheus.Gauge, evictions prometheus.Counter) *responseCache {
	return &responseCache{limit: limit, bytes: bytes, evictions: evictions, items: map[cacheKey]*list.Element{}}
}

// get returns a copy of the outputs stored under k.
func (c *responseCache) get(k cacheKey) ([]infer.Tensor, bool) {
	c.mu.Lock()
	el, ok := c.items[k]
	if !ok {
		c.mu.Unlock()
		return nil, false
	}
	c.lru.MoveToFront(el)
	stored := el.Value.(*cacheEntry).outputs
	c.mu.Unlock()
	// Stored tensors are never modified, so copying outside the lock is
	// safe.
	return cloneTensors(stored), true
}

// put stores a copy of outputs under k for the loaded version owner,
// evicting the least recently used entries to make room. A response
// larger than the whole cache is not stored.
func (c *responseCache) put(k cacheKey, owner uint64, outputs []infer.Tensor) (size int64, fits bool) {
	size = int64(cacheEntryOverhead)
	for _, t := range outputs {
		size += cacheTensorOverhead + int64(len(t.Name)) + 8*int64(len(t.Shape)) + int64(len(t.Data))
	}
	if size > c.limit {
		return size, false
	}
	e := &cacheEntry{key: k, owner: owner, outputs: cloneTensors(outputs), size: size}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[k]; ok {
		// A concurrent miss computed the same response first.
		c.lru.MoveToFront(el)
		return size, true
	}
	for c.used+size > c.limit {
		c.removeLocked(c.lru.Back())
		c.evictions.Inc()
	}
	c.items[k] = c.lru.PushFront(e)
	c.used += size
	c.bytes.Set(float64(c.used))
	return size, true
}

// drop removes every entry computed by the loaded version owner and
// returns how many there were.
func (c *responseCache) drop(owner uint64) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for el := c.lru.Front(); el != nil; {
		next := el.Next()
		if el.Value.(*cacheEntry).owner == owner {
			c.removeLocked(el)
			n++
		}
		el = next
	}
	c.bytes.Set(float64(c.used))
	return n
}

func (c *responseCache) removeLocked(el *list.Element) {
	e := el.Value.(*cacheEntry)
	c.lru.Remove(el)
	delete(c.items, e.key)
	c.used -= e.size
	c.bytes.Set(float64(c.used))
}

// size returns the bytes the entries take and their number.
func (c *responseCache) size() (int64, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.used, len(c.items)
}

func cloneTensors(in []infer.Tensor) []infer.Tensor {
	out := make([]infer.Tensor, len(in))
	for i, t := range in {
		out[i] = infer.Tensor{
			Name:     t.Name,
			DataType: t.DataType,
			Shape:    t.Shape.Clone(),
			Data:     append([]byte(nil), t.Data...),
		}
	}
	return out
}
