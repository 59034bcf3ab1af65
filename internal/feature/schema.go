package feature

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
)

// SchemaID identifies the layout of a stored row's payload: a
// fingerprint of the view's ordered (name, dtype) list when the row was
// written. Zero means unknown: a row written before rows carried their
// schema (see ParseRecord).
type SchemaID uint64

// Fingerprint returns the SchemaID of schema: the first 8 bytes of
// SHA-256 over the ordered feature names and dtypes. Two schemas share an
// id only when they list the same names with the same types in the same
// order (up to a 2⁻⁶⁴ collision). It is never zero or SchemaUnreadable.
func Fingerprint(schema []Field) SchemaID {
	h := sha256.New()
	var buf []byte
	for _, f := range schema {
		buf = buf[:0]
		buf = binary.AppendUvarint(buf, uint64(len(f.Name)))
		buf = append(buf, f.Name...)
		t := f.Type.String()
		buf = binary.AppendUvarint(buf, uint64(len(t)))
		buf = append(buf, t...)
		_, _ = h.Write(buf)
	}
	var sum [sha256.Size]byte
	id := SchemaID(binary.BigEndian.Uint64(h.Sum(sum[:0])))
	if id == 0 || id == SchemaUnreadable {
		id = 1 // both are reserved
	}
	return id
}

// SchemaUnreadable is the schema id of a stored record whose storage form
// this version does not know (ParseRecord). No schema has it, so readers
// answer its values NOT_FOUND rather than guess.
const SchemaUnreadable SchemaID = math.MaxUint64

// String formats id as 16 hex digits, or "legacy" for zero.
func (id SchemaID) String() string {
	if id == 0 {
		return "legacy"
	}
	s := strconv.FormatUint(uint64(id), 16)
	for len(s) < 16 {
		s = "0" + s
	}
	return s
}

// SchemaMetaName is the online store metadata name of a view's schema id:
// "view_schema/<view>/<16 hex digits>", holding EncodeSchema's document.
// Id zero names the schema of the view's legacy rows (rows without a
// schema id): "view_schema/<view>/legacy".
func SchemaMetaName(view string, id SchemaID) string {
	return "view_schema/" + view + "/" + id.String()
}

// schemaDoc is the stored form of a schema.
type schemaDoc struct {
	Fields []schemaDocField `json:"fields"`
}

type schemaDocField struct {
	Name  string `json:"name"`
	Dtype string `json:"dtype"`
}

// EncodeSchema returns the metadata document of schema:
// {"fields": [{"name": …, "dtype": …}, …]} in schema order.
func EncodeSchema(schema []Field) []byte {
	d := schemaDoc{Fields: make([]schemaDocField, len(schema))}
	for i, f := range schema {
		d.Fields[i] = schemaDocField{Name: f.Name, Dtype: f.Type.String()}
	}
	b, _ := json.Marshal(d) // cannot fail: strings only
	return b
}

// maxSchemaFields bounds a decoded schema document.
const maxSchemaFields = 1 << 16

// DecodeSchema parses EncodeSchema's document. It rejects documents that
// no schema encodes to: no fields, empty or repeated names, unknown
// dtypes.
func DecodeSchema(b []byte) ([]Field, error) {
	var d schemaDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("decode schema: %w", err)
	}
	if len(d.Fields) == 0 || len(d.Fields) > maxSchemaFields {
		return nil, fmt.Errorf("decode schema: %d fields, want 1 to %d", len(d.Fields), maxSchemaFields)
	}
	out := make([]Field, len(d.Fields))
	seen := make(map[string]bool, len(d.Fields))
	for i, f := range d.Fields {
		if f.Name == "" || seen[f.Name] {
			return nil, fmt.Errorf("decode schema: field %d: empty or repeated name %q", i, f.Name)
		}
		seen[f.Name] = true
		t, err := ParseType(f.Dtype)
		if err != nil {
			return nil, fmt.Errorf("decode schema: field '%s': %w", f.Name, err)
		}
		out[i] = Field{Name: f.Name, Type: t}
	}
	return out, nil
}

// FieldState says whether a feature of the current schema can be read
// from a row written with another schema.
type FieldState uint8

// The field states.
const (
	// FieldReadable: the row has the feature, with the same type.
	FieldReadable FieldState = iota
	// FieldNotInRow: the row's schema has no feature of that name (it was
	// added since the row was written).
	FieldNotInRow
	// FieldRetyped: the row has the feature with another type; its bytes
	// are never reinterpreted.
	FieldRetyped
)

// Mapping translates a row written with one schema (Old) into the
// current one, by feature name: Old's field i holds the current field
// ToCur[i] (-1 when the current schema no longer has it, or has it with
// another type), and State[j] says whether current field j can be read
// from such a row. Reordering and appending features are thus harmless;
// a removed feature is skipped, an added or retyped one is not in the row.
type Mapping struct {
	Old   []Field
	ToCur []int
	State []FieldState
}

// MapSchema returns the mapping from rows written with old to cur.
func MapSchema(old, cur []Field) Mapping {
	m := Mapping{Old: old, ToCur: make([]int, len(old)), State: make([]FieldState, len(cur))}
	idx := make(map[string]int, len(cur))
	for j, f := range cur {
		idx[f.Name] = j
		m.State[j] = FieldNotInRow
	}
	for i, f := range old {
		j, ok := idx[f.Name]
		switch {
		case !ok:
			m.ToCur[i] = -1
		case f.Type != cur[j].Type:
			m.ToCur[i] = -1
			m.State[j] = FieldRetyped
		default:
			m.ToCur[i] = j
			m.State[j] = FieldReadable
		}
	}
	return m
}
