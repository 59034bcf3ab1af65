package infer

// DataType is a KServe v2 tensor data type.
type DataType uint8

// The KServe v2 data types. The zero value is Invalid.
const (
	Invalid DataType = iota
	Bool
	Uint8
	Uint16
	Uint32
	Uint64
	Int8
	Int16
	Int32
	Int64
	FP16
	FP32
	FP64
	Bytes
	BF16
)

var dataTypeNames = [...]string{
	Invalid: "INVALID",
	Bool:    "BOOL",
	Uint8:   "UINT8",
	Uint16:  "UINT16",
	Uint32:  "UINT32",
	Uint64:  "UINT64",
	Int8:    "INT8",
	Int16:   "INT16",
	Int32:   "INT32",
	Int64:   "INT64",
	FP16:    "FP16",
	FP32:    "FP32",
	FP64:    "FP64",
	Bytes:   "BYTES",
	BF16:    "BF16",
}

var dataTypeSizes = [...]int{
	Bool: 1, Uint8: 1, Uint16: 2, Uint32: 4, Uint64: 8,
	Int8: 1, Int16: 2, Int32: 4, Int64: 8,
	FP16: 2, FP32: 4, FP64: 8, Bytes: 0, BF16: 2,
}

// String returns the protocol name, e.g. "FP32".
func (d DataType) String() string {
	if int(d) < len(dataTypeNames) {
		return dataTypeNames[d]
	}
	return "INVALID"
}

// Size returns the byte size of one element, or 0 for BYTES and Invalid.
func (d DataType) Size() int {
	if int(d) < len(dataTypeSizes) {
		return dataTypeSizes[d]
	}
	return 0
}

// Valid reports whether d is one of the defined data types.
func (d DataType) Valid() bool { return d > Invalid && d <= BF16 }

// ParseDataType maps a protocol name ("FP32") to its DataType.
func ParseDataType(s string) (DataType, bool) {
	for i, n := range dataTypeNames {
		if i > 0 && n == s {
			return DataType(i), true
		}
	}
	return Invalid, false
}
