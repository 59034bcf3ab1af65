package infer

// TensorSpec describes one input or output of a model: its name, data type
// and shape, where -1 marks a variable dimension. Backends report specs
// including any batch dimension.
type TensorSpec struct {
	Name     string
	DataType DataType
	Shape    Shape
	// Optional inputs have a value in the model (an ONNX graph input
	// backed by an initializer): requests may leave them out.
	Optional bool
}

// Signature is a model's inputs and outputs, in the model's order.
type Signature struct {
	Inputs  []TensorSpec
	Outputs []TensorSpec
}
