package offline

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// Limits on what a Parquet file may declare. parquet-go trusts the sizes
// and counts it decodes (it allocates a thrift list or a byte string of the
// declared length before reading it), so every file is checked against
// these limits and against its own size before parquet-go sees it.
const (
	maxFooterSize      = 64 << 20  // bytes of file metadata
	maxDecodedMetadata = 1 << 30   // estimated bytes of decoded thrift structures
	maxThriftDepth     = 64        // nesting of thrift structs, lists and maps
	maxSchemaElements  = 1 << 16   // schema nodes
	maxSchemaDepth     = 32        // nesting of schema groups
	maxPageHeaderSize  = 16 << 20  // bytes of one page header (statistics included)
	maxPageSize        = 512 << 20 // declared bytes of one page, compressed or not
	maxPageValues      = 1 << 24   // values (levels included) in one page
	thriftStructCost   = 640       // upper bound of one decoded format.* struct
	thriftElemCost     = 24        // upper bound of one decoded scalar or string header
)

var errTruncated = errors.New("truncated thrift data")

// thriftCheck walks a thrift compact-protocol struct without decoding it,
// rejecting any length or count that exceeds the bytes left and bounding
// nesting and the estimated size of the decoded value.
type thriftCheck struct {
	b    []byte
	off  int
	cost int64
}

func (c *thriftCheck) byte() (byte, error) {
	if c.off >= len(c.b) {
		return 0, errTruncated
	}
	b := c.b[c.off]
	c.off++
	return b, nil
}

func (c *thriftCheck) uvarint() (uint64, error) {
	v, n := binary.Uvarint(c.b[c.off:])
	if n == 0 {
		return 0, errTruncated
	}
	if n < 0 {
		return 0, errors.New("bad varint")
	}
	c.off += n
	return v, nil
}

// count reads a length or element count and checks that at least
// minBytes*n bytes remain.
func (c *thriftCheck) count(n uint64, minBytes int) (int, error) {
	left := uint64(len(c.b) - c.off)
	if n > math32 || n*uint64(minBytes) > left {
		if n*uint64(minBytes) > left && uint64(len(c.b)) >= n*uint64(minBytes) {
			return 0, errTruncated
		}
		return 0, fmt.Errorf("declared length %d exceeds the data", n)
	}
	return int(n), nil
}

const math32 = 1<<31 - 1

func (c *thriftCheck) addCost(n int, typ byte) error {
	per := int64(thriftElemCost)
	if typ == 12 {
		per = thriftStructCost
	}
	c.cost += int64(n) * per
	if c.cost > maxDecodedMetadata {
		return errors.New("metadata too large")
	}
	return nil
}

// value skips one compact-protocol value of type typ, checking its
// declared sizes against the data and the decoded-cost budget.
func (c *thriftCheck) value(typ byte, depth int) error {
	if depth > maxThriftDepth {
		return errors.New("metadata nested too deeply")
	}
	switch typ {
	case 1, 2: // bool (in a list: one byte)
		return nil
	case 3:
		_, err := c.byte()
		return err
	case 4, 5, 6:
		_, err := c.uvarint()
		return err
	case 7:
		if len(c.b)-c.off < 8 {
			return errTruncated
		}
		c.off += 8
		return nil
	case 8:
		return c.binary()
	case 9, 10:
		return c.list(depth)
	case 11:
		return c.mapValue(depth)
	case 12:
		return c.structValue(depth)
	default:
		return fmt.Errorf("bad thrift type %d", typ)
	}
}

// binary skips a length-prefixed binary or string value.
func (c *thriftCheck) binary() error {
	l, err := c.uvarint()
	if err != nil {
		return err
	}
	n, err := c.count(l, 1)
	if err != nil {
		return err
	}
	c.off += n
	return nil
}

// element skips one element of a list, set or map, where a bool takes
// one byte of its own.
func (c *thriftCheck) element(t byte, depth int) error {
	if t == 1 || t == 2 {
		_, err := c.byte()
		return err
	}
	return c.value(t, depth+1)
}

// list skips a list or set: a size-and-type header, then its elements.
func (c *thriftCheck) list(depth int) error {
	h, err := c.byte()
	if err != nil {
		return err
	}
	size, et := uint64(h>>4), h&0xf
	if size == 0xf {
		if size, err = c.uvarint(); err != nil {
			return err
		}
	}
	n, err := c.count(size, 1)
	if err != nil {
		return err
	}
	if err := c.addCost(n, et); err != nil {
		return err
	}
	for range n {
		if err := c.element(et, depth); err != nil {
			return err
		}
	}
	return nil
}

// mapValue skips a map: its size, one key-and-value type byte unless
// empty, then its key and value pairs.
func (c *thriftCheck) mapValue(depth int) error {
	size, err := c.uvarint()
	if err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	n, err := c.count(size, 2)
	if err != nil {
		return err
	}
	kv, err := c.byte()
	if err != nil {
		return err
	}
	kt, vt := kv>>4, kv&0xf
	if err := c.addCost(2*n, 0); err != nil {
		return err
	}
	for range n {
		if err := c.element(kt, depth); err != nil {
			return err
		}
		if err := c.element(vt, depth); err != nil {
			return err
		}
	}
	return nil
}

// structValue skips a struct's fields up to its stop byte.
func (c *thriftCheck) structValue(depth int) error {
	for {
		h, err := c.byte()
		if err != nil {
			return err
		}
		if h == 0 {
			return nil
		}
		if h>>4 == 0 { // long form: the field id follows
			if _, err := c.uvarint(); err != nil {
				return err
			}
		}
		if err := c.value(h&0xf, depth+1); err != nil {
			return err
		}
	}
}

// checkThriftStruct checks the thrift struct at the start of b and returns
// its encoded length; errTruncated means b ends inside it.
func checkThriftStruct(b []byte) (int, error) {
	c := thriftCheck{b: b, cost: thriftStructCost}
	if err := c.value(12, 0); err != nil {
		return 0, err
	}
	return c.off, nil
}

// readMetadata reads, checks and decodes the footer of a Parquet file of
// the given size.
func readMetadata(r io.ReaderAt, size int64) (*format.FileMetaData, error) {
	if size < 12 {
		return nil, errors.New("too small for a Parquet file")
	}
	var head, tail [8]byte
	if _, err := r.ReadAt(head[:4], 0); err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	if _, err := r.ReadAt(tail[:], size-8); err != nil {
		return nil, fmt.Errorf("read footer: %w", err)
	}
	if string(tail[4:]) == "PARE" {
		return nil, errors.New("encrypted Parquet files are not supported")
	}
	if string(head[:4]) != "PAR1" || string(tail[4:]) != "PAR1" {
		return nil, errors.New("not a Parquet file (bad magic bytes)")
	}
	n := int64(binary.LittleEndian.Uint32(tail[:4]))
	if n == 0 || n > size-12 {
		return nil, fmt.Errorf("footer length %d does not fit in the file (%d bytes)", n, size)
	}
	if n > maxFooterSize {
		return nil, fmt.Errorf("footer length %d exceeds the limit of %d bytes", n, maxFooterSize)
	}
	buf := make([]byte, n)
	if _, err := r.ReadAt(buf, size-8-n); err != nil {
		return nil, fmt.Errorf("read footer: %w", err)
	}
	end, err := checkThriftStruct(buf)
	if err != nil {
		return nil, fmt.Errorf("file metadata: %w", err)
	}
	if end != len(buf) {
		return nil, fmt.Errorf("file metadata: %d unexpected trailing bytes", len(buf)-end)
	}
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), buf, &md); err != nil {
		return nil, fmt.Errorf("file metadata: %w", err)
	}
	if err := checkMetadata(&md, size-8-n); err != nil {
		return nil, fmt.Errorf("file metadata: %w", err)
	}
	return &md, nil
}

// checkMetadata checks the schema tree and that every column chunk lies
// within the data part of the file, [4, dataEnd).
func checkMetadata(md *format.FileMetaData, dataEnd int64) error {
	if len(md.Schema) == 0 {
		return errors.New("no schema")
	}
	if len(md.Schema) > maxSchemaElements {
		return fmt.Errorf("%d schema elements exceed the limit of %d", len(md.Schema), maxSchemaElements)
	}
	if md.NumRows < 0 {
		return fmt.Errorf("negative row count %d", md.NumRows)
	}
	// Walk the schema tree (preorder with child counts) iteratively.
	leaves := 0
	pending := []int32{md.Schema[0].NumChildren.V} // children left per open group
	if md.Schema[0].NumChildren.V < 0 {
		return errors.New("negative schema child count")
	}
	for i := 1; i < len(md.Schema); i++ {
		for len(pending) > 0 && pending[len(pending)-1] == 0 {
			pending = pending[:len(pending)-1]
		}
		if len(pending) == 0 {
			return errors.New("schema elements past the root's children")
		}
		pending[len(pending)-1]--
		nc := md.Schema[i].NumChildren.V
		switch {
		case nc < 0 || int(nc) > len(md.Schema)-i-1:
			return fmt.Errorf("schema element %q declares %d children", md.Schema[i].Name, nc)
		case nc > 0:
			if len(pending) >= maxSchemaDepth {
				return fmt.Errorf("schema nested deeper than %d levels", maxSchemaDepth)
			}
			pending = append(pending, nc)
		default:
			leaves++
		}
	}
	for _, p := range pending {
		if p != 0 {
			return errors.New("schema ends inside a group")
		}
	}
	for i := range md.RowGroups {
		rg := &md.RowGroups[i]
		if rg.NumRows < 0 {
			return fmt.Errorf("row group %d: negative row count %d", i, rg.NumRows)
		}
		if len(rg.Columns) != leaves {
			return fmt.Errorf("row group %d: %d column chunks for %d columns", i, len(rg.Columns), leaves)
		}
		for j := range rg.Columns {
			if err := checkChunk(&rg.Columns[j].MetaData, dataEnd); err != nil {
				return fmt.Errorf("row group %d: column chunk %d: %w", i, j, err)
			}
		}
	}
	return nil
}

func checkChunk(m *format.ColumnMetaData, dataEnd int64) error {
	base := m.DataPageOffset
	if m.DictionaryPageOffset != 0 {
		base = m.DictionaryPageOffset
		if m.DataPageOffset < base {
			return errors.New("data pages before the dictionary page")
		}
	}
	if base < 4 || m.TotalCompressedSize < 0 || m.TotalCompressedSize > dataEnd-base {
		return fmt.Errorf("offset %d and size %d lie outside the file's data", base, m.TotalCompressedSize)
	}
	if m.DataPageOffset >= base+m.TotalCompressedSize && m.TotalCompressedSize > 0 {
		return errors.New("data page offset past the column chunk")
	}
	if m.NumValues < 0 {
		return fmt.Errorf("negative value count %d", m.NumValues)
	}
	return nil
}

// checkPages walks the page headers of a column chunk (as parquet-go will
// read them) and checks each page's declared sizes and counts.
func checkPages(f io.ReaderAt, m *format.ColumnMetaData) error {
	off := m.DataPageOffset
	if m.DictionaryPageOffset != 0 {
		off = m.DictionaryPageOffset
	}
	end := off + m.TotalCompressedSize
	buf := make([]byte, 0, 4096)
	for page := 0; off < end; page++ {
		var hdr format.PageHeader
		var hlen int
		for want := int64(256); ; want *= 4 {
			want = min(want, end-off, maxPageHeaderSize)
			buf = buf[:want]
			if _, err := f.ReadAt(buf, off); err != nil {
				return fmt.Errorf("page %d: read header: %w", page, err)
			}
			n, err := checkThriftStruct(buf)
			if errors.Is(err, errTruncated) && want < min(end-off, maxPageHeaderSize) {
				continue
			}
			if err != nil {
				return fmt.Errorf("page %d: header: %w", page, err)
			}
			hlen = n
			break
		}
		if err := thrift.Unmarshal(new(thrift.CompactProtocol), buf[:hlen], &hdr); err != nil {
			return fmt.Errorf("page %d: header: %w", page, err)
		}
		if err := checkPageHeader(&hdr, end-off-int64(hlen)); err != nil {
			return fmt.Errorf("page %d: %w", page, err)
		}
		off += int64(hlen) + int64(hdr.CompressedPageSize)
	}
	return nil
}

func checkPageHeader(h *format.PageHeader, left int64) error {
	if h.CompressedPageSize < 0 || int64(h.CompressedPageSize) > left {
		return fmt.Errorf("compressed size %d exceeds the column chunk", h.CompressedPageSize)
	}
	if h.UncompressedPageSize < 0 || h.UncompressedPageSize > maxPageSize {
		return fmt.Errorf("uncompressed size %d out of range", h.UncompressedPageSize)
	}
	var nv int32
	switch {
	case h.DataPageHeader.Valid:
		nv = h.DataPageHeader.V.NumValues
	case h.DataPageHeaderV2.Valid:
		v := &h.DataPageHeaderV2.V
		nv = v.NumValues
		if v.NumRows < 0 || v.NumRows > nv || v.NumNulls < 0 || v.NumNulls > nv {
			return errors.New("inconsistent row, null and value counts")
		}
		if v.RepetitionLevelsByteLength < 0 || v.DefinitionLevelsByteLength < 0 ||
			int64(v.RepetitionLevelsByteLength)+int64(v.DefinitionLevelsByteLength) > int64(h.CompressedPageSize) {
			return errors.New("level lengths exceed the page")
		}
	case h.DictionaryPageHeader.Valid:
		nv = h.DictionaryPageHeader.V.NumValues
	}
	if nv < 0 || nv > maxPageValues {
		return fmt.Errorf("value count %d out of range", nv)
	}
	return nil
}
