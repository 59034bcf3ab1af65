package feature

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Record is one stored row of a view for one entity: what online stores
// keep per (view, entity key). Payload is the view's features encoded with
// AppendValues, in the order of the schema Schema identifies; stores never
// look inside it.
type Record struct {
	EventTS   int64 // ns since the epoch, UTC
	CreatedTS int64 // ns since the epoch, UTC; 0 when the source has none
	// Schema identifies the schema Payload was encoded with
	// (Fingerprint); zero for a legacy row, written before rows carried
	// it, and SchemaUnreadable for a storage form this version does not
	// know.
	Schema  SchemaID
	Payload []byte
}

// Newer reports whether r should replace old: a later event timestamp, or
// the same event timestamp and a later created timestamp.
func (r Record) Newer(old Record) bool {
	if r.EventTS != old.EventTS {
		return r.EventTS > old.EventTS
	}
	return r.CreatedTS > old.CreatedTS
}

// Replaces reports whether a write of r replaces the stored row old when
// it is not an overwrite: r is newer, or it has the same timestamps and
// another schema. The second case lets materialization after a schema
// change rewrite rows whose event time did not change; it never moves a
// value backwards in time.
func (r Record) Replaces(old Record) bool {
	if r.Newer(old) {
		return true
	}
	return r.EventTS == old.EventTS && r.CreatedTS == old.CreatedTS && r.Schema != old.Schema
}

// ErrCorrupt reports stored bytes that do not decode.
var ErrCorrupt = errors.New("corrupt feature record")

// Storage form. A record starts with its event and created timestamps (8
// bytes little-endian each), so stores can compare them without decoding
// the rest (the Redis store's Lua script does). Then comes recordTag and
// the 8-byte schema id (little-endian), then the payload: RecordHeader
// bytes in all. Legacy records have the payload right after the
// timestamps; their payload starts with a presence byte (0 or 1) or is
// empty, which is how ParseRecord tells them from tagged records.
const (
	recordTag = 2
	// RecordHeader is the length of a record's storage form before its
	// payload: timestamps, tag and schema id.
	RecordHeader = 16 + 1 + 8
)

// AppendRecord appends r's storage form: event ts, created ts (8 bytes
// little-endian each), a tag byte, the schema id (8 bytes little-endian),
// then the payload.
func AppendRecord(dst []byte, r Record) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.EventTS))
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.CreatedTS))
	dst = append(dst, recordTag)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Schema))
	return append(dst, r.Payload...)
}

// ParseRecord decodes AppendRecord's output, and the legacy form without
// tag and schema id (Schema is zero then). A record with a tag it does
// not know gets Schema SchemaUnreadable. Payload aliases b.
func ParseRecord(b []byte) (Record, error) {
	if len(b) < 16 {
		return Record{}, fmt.Errorf("%w: %d bytes, need at least 16", ErrCorrupt, len(b))
	}
	r := Record{
		EventTS:   int64(binary.LittleEndian.Uint64(b)),
		CreatedTS: int64(binary.LittleEndian.Uint64(b[8:])),
		Payload:   b[16:],
	}
	if len(b) == 16 || b[16] < recordTag {
		return r, nil // legacy: the payload's first presence byte, or none
	}
	if b[16] != recordTag {
		// A storage form this version does not know (a later version
		// wrote it): the timestamps still order writes, but no schema
		// decodes the rest.
		r.Schema = SchemaUnreadable
		return r, nil
	}
	if len(b) < RecordHeader {
		return Record{}, fmt.Errorf("%w: %d bytes, need at least %d", ErrCorrupt, len(b), RecordHeader)
	}
	r.Schema = SchemaID(binary.LittleEndian.Uint64(b[17:]))
	r.Payload = b[RecordHeader:]
	return r, nil
}

// AppendValues encodes vals (one per field, in schema order) for storage.
// Each value is a presence byte (0 null, 1 present) and then its data:
// zig-zag varints for integers, little-endian IEEE floats, uvarint-length
// prefixed strings and bytes, one byte for bools, and lists as a uvarint
// count followed by their elements.
func AppendValues(dst []byte, schema []Field, vals []Value) ([]byte, error) {
	if len(vals) != len(schema) {
		return nil, fmt.Errorf("%d values for %d fields", len(vals), len(schema))
	}
	for i, f := range schema {
		v := &vals[i]
		if v.Null {
			dst = append(dst, 0)
			continue
		}
		dst = append(dst, 1)
		if !f.Type.List {
			dst = appendScalar(dst, f.Type.Kind, v)
			continue
		}
		n := listLen(f.Type.Kind, v)
		if f.Type.Len > 0 && n != f.Type.Len {
			return nil, fmt.Errorf("feature '%s': %s needs %d elements, got %d", f.Name, f.Type, f.Type.Len, n)
		}
		dst = binary.AppendUvarint(dst, uint64(n))
		switch f.Type.Kind {
		case KindInt32, KindInt64:
			for _, x := range v.I64s {
				dst = binary.AppendVarint(dst, x)
			}
		case KindFloat32:
			for _, x := range v.F32s {
				dst = binary.LittleEndian.AppendUint32(dst, math.Float32bits(x))
			}
		case KindFloat64:
			for _, x := range v.F64s {
				dst = binary.LittleEndian.AppendUint64(dst, math.Float64bits(x))
			}
		case KindString, KindBytes:
			for _, x := range v.Ss {
				dst = binary.AppendUvarint(dst, uint64(len(x)))
				dst = append(dst, x...)
			}
		case KindBool:
			for _, x := range v.Bools {
				dst = append(dst, b2u(x))
			}
		default:
			return nil, fmt.Errorf("feature '%s': lists of %s are not supported", f.Name, f.Type.Kind)
		}
	}
	return dst, nil
}

func listLen(k Kind, v *Value) int {
	switch k {
	case KindInt32, KindInt64:
		return len(v.I64s)
	case KindFloat32:
		return len(v.F32s)
	case KindFloat64:
		return len(v.F64s)
	case KindString, KindBytes:
		return len(v.Ss)
	case KindBool:
		return len(v.Bools)
	default:
		return 0
	}
}

func b2u(b bool) byte {
	if b {
		return 1
	}
	return 0
}

func appendScalar(dst []byte, k Kind, v *Value) []byte {
	switch k {
	case KindInt32, KindInt64, KindUnixTimestamp:
		return binary.AppendVarint(dst, v.I64)
	case KindFloat32:
		return binary.LittleEndian.AppendUint32(dst, math.Float32bits(float32(v.F64)))
	case KindFloat64:
		return binary.LittleEndian.AppendUint64(dst, math.Float64bits(v.F64))
	case KindString:
		dst = binary.AppendUvarint(dst, uint64(len(v.S)))
		return append(dst, v.S...)
	case KindBytes:
		dst = binary.AppendUvarint(dst, uint64(len(v.B)))
		return append(dst, v.B...)
	case KindBool:
		return append(dst, b2u(v.Bool))
	default:
		return dst
	}
}

// DecodeValues decodes AppendValues's output into vals (resized to the
// schema). Strings and byte slices are copied; nothing aliases b.
func DecodeValues(b []byte, schema []Field, vals []Value) ([]Value, error) {
	vals = slices.Grow(vals[:0], len(schema))
	d := decoder{b: b}
	for _, f := range schema {
		vals = append(vals, Value{})
		if err := d.field(f, &vals[len(vals)-1]); err != nil {
			return nil, err
		}
	}
	if err := d.end(); err != nil {
		return nil, err
	}
	return vals, nil
}

// DecodeValuesInto decodes AppendValues's output like DecodeValues, but
// stores field i's value in *dst[i], overwriting it, so a caller can
// decode straight into where the values are wanted. A field whose dst[i]
// is nil is decoded and checked but not kept. dst has one entry per field.
// On error the values stored so far are left in place.
func DecodeValuesInto(b []byte, schema []Field, dst []*Value) error {
	if len(dst) != len(schema) {
		return fmt.Errorf("%d destinations for %d fields", len(dst), len(schema))
	}
	schema = schema[:len(dst)]
	d := decoder{b: b}
	for i, v := range dst {
		f := schema[i]
		if v == nil {
			var tmp Value
			v = &tmp
		} else {
			v.reset()
		}
		if err := d.field(f, v); err != nil {
			return err
		}
	}
	return d.end()
}

// DecodeValuesAt decodes like DecodeValuesInto with the destinations
// given as indexes: field i's value goes to vals[at[i]], overwriting it,
// or is decoded, checked and dropped when at[i] is negative. Filling an
// index list writes no pointers, so it costs no write barriers while the
// collector runs, as a list of pointers does. On error the values stored
// so far are left in place.
func DecodeValuesAt(b []byte, schema []Field, vals []Value, at []int) error {
	if len(at) != len(schema) {
		return fmt.Errorf("%d destinations for %d fields", len(at), len(schema))
	}
	d := decoder{b: b}
	var tmp Value
	for i, f := range schema {
		v := &tmp
		if k := at[i]; k >= 0 {
			v = &vals[k]
		}
		v.reset()
		if err := d.field(f, v); err != nil {
			return err
		}
	}
	return d.end()
}

// reset zeroes v. Assigning Value{} writes every pointer field, which
// costs a write barrier per field while the collector runs; a decode
// destination usually is zero already (fresh memory) or holds a scalar,
// so only the fields that are set are written.
func (v *Value) reset() {
	if v.S != "" || v.B != nil || v.I64s != nil || v.F32s != nil || v.F64s != nil || v.Ss != nil || v.Bools != nil {
		*v = Value{}
		return
	}
	v.Null, v.I64, v.F64, v.Bool = false, 0, 0, false
}

// field decodes one value of f into v, which is zero.
func (d *decoder) field(f Field, v *Value) error {
	switch d.byte() {
	case 0:
		v.Null = true
	case 1:
		if f.Type.List {
			d.list(f.Type.Kind, v)
		} else {
			d.scalar(f.Type.Kind, v)
		}
	default:
		d.fail()
	}
	if d.err != nil {
		return fmt.Errorf("%w: feature '%s': %w", ErrCorrupt, f.Name, d.err)
	}
	return nil
}

// decoder reads b from off on. It moves an index rather than re-slicing
// b: a slice header written through the pointer receiver costs a write
// barrier per value while the collector runs.
type decoder struct {
	b   []byte
	off int
	err error
}

var errShort = errors.New("truncated")

// end fails a row with bytes left after its last field.
func (d *decoder) end() error {
	if d.rest() != 0 {
		return fmt.Errorf("%w: %d trailing bytes", ErrCorrupt, d.rest())
	}
	return nil
}

// rest is the number of bytes not read yet.
func (d *decoder) rest() int { return len(d.b) - d.off }

func (d *decoder) fail() {
	if d.err == nil {
		d.err = errShort
	}
	d.off = len(d.b)
}

func (d *decoder) byte() byte {
	if d.off >= len(d.b) {
		d.fail()
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *decoder) varint() int64 {
	x, n := binary.Varint(d.b[d.off:])
	if n <= 0 {
		d.fail()
		return 0
	}
	d.off += n
	return x
}

func (d *decoder) uvarint(limit uint64) int {
	x, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 || x > limit {
		d.fail()
		return 0
	}
	d.off += n
	return int(x)
}

func (d *decoder) fixed(n int) []byte {
	if d.rest() < n {
		d.fail()
		return nil
	}
	out := d.b[d.off : d.off+n]
	d.off += n
	return out
}

func (d *decoder) str() string {
	n := d.uvarint(uint64(d.rest()))
	return string(d.fixed(n))
}

func (d *decoder) scalar(k Kind, v *Value) {
	switch k {
	case KindInt32, KindInt64, KindUnixTimestamp:
		v.I64 = d.varint()
	case KindFloat32:
		if b := d.fixed(4); b != nil {
			v.F64 = float64(math.Float32frombits(binary.LittleEndian.Uint32(b)))
		}
	case KindFloat64:
		if b := d.fixed(8); b != nil {
			v.F64 = math.Float64frombits(binary.LittleEndian.Uint64(b))
		}
	case KindString:
		v.S = d.str()
	case KindBytes:
		n := d.uvarint(uint64(d.rest()))
		v.B = append([]byte(nil), d.fixed(n)...)
	case KindBool:
		v.Bool = d.byte() != 0
	default:
		d.fail()
	}
}

func (d *decoder) list(k Kind, v *Value) {
	// Every element takes at least one byte, so the count cannot exceed
	// what is left: a corrupt count cannot make us allocate much.
	n := d.uvarint(uint64(d.rest()))
	if d.err != nil {
		return
	}
	switch k {
	case KindInt32, KindInt64:
		v.I64s = make([]int64, 0, n)
		for range n {
			v.I64s = append(v.I64s, d.varint())
		}
	case KindFloat32:
		v.F32s = make([]float32, 0, n)
		for range n {
			if b := d.fixed(4); b != nil {
				v.F32s = append(v.F32s, math.Float32frombits(binary.LittleEndian.Uint32(b)))
			}
		}
	case KindFloat64:
		v.F64s = make([]float64, 0, n)
		for range n {
			if b := d.fixed(8); b != nil {
				v.F64s = append(v.F64s, math.Float64frombits(binary.LittleEndian.Uint64(b)))
			}
		}
	case KindString, KindBytes:
		v.Ss = make([]string, 0, n)
		for range n {
			v.Ss = append(v.Ss, d.str())
		}
	case KindBool:
		v.Bools = make([]bool, 0, n)
		for range n {
			v.Bools = append(v.Bools, d.byte() != 0)
		}
	default:
		d.fail()
	}
}

// AppendEntityKey appends the storage key of one entity row: for each join
// key value, in the view's entity order, its kind byte and then its bytes
// (uvarint-length prefixed for strings and bytes, 8 bytes little-endian
// for integers, so Int32 5 and Int64 5 give the same key).
func AppendEntityKey(dst []byte, kinds []Kind, vals []Value) ([]byte, error) {
	if len(kinds) != len(vals) {
		return nil, fmt.Errorf("%d key values for %d join keys", len(vals), len(kinds))
	}
	for i, k := range kinds {
		v := &vals[i]
		if v.Null {
			return nil, fmt.Errorf("join key %d is null", i)
		}
		switch k {
		case KindInt32, KindInt64:
			dst = append(dst, byte(KindInt64))
			dst = binary.LittleEndian.AppendUint64(dst, uint64(v.I64))
		case KindString:
			dst = append(dst, byte(KindString))
			dst = binary.AppendUvarint(dst, uint64(len(v.S)))
			dst = append(dst, v.S...)
		case KindBytes:
			dst = append(dst, byte(KindBytes))
			dst = binary.AppendUvarint(dst, uint64(len(v.B)))
			dst = append(dst, v.B...)
		default:
			return nil, fmt.Errorf("join keys of type %s are not supported (use Int32, Int64, String or Bytes)", k)
		}
	}
	return dst, nil
}
