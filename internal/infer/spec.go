package infer

// TensorSpec describes one input or output of a model: its name, data type
// and shape, where -1 marks a variable dimension. Backends report specs
// including any batch dimension.
type TensorSpec struct {
	Name     string
	DataType DataType
	Shape    Shape
}

// Signature is a model's inputs and outputs, in the model's order.
type Signature struct {
	Inputs  []TensorSpec
	Outputs []TensorSpec
}
