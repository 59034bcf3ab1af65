package feature

// RequestSource is request data (Feast's RequestSource): typed fields the
// caller sends with each online read (in the request's entities or
// request_context) and that historical retrieval takes from the entity
// rows' columns of the same names. On-demand feature views read them.
type RequestSource struct {
	Name   string
	Schema []Field
}

// OnDemandView is an on-demand feature view (Feast's
// OnDemandFeatureView): features computed at request time, by one
// expression each, from request data and other feature views' features.
// Nothing is stored for it; serving and historical retrieval compute it
// with the same compiled expressions.
type OnDemandView struct {
	Name string
	// Sources are the request sources and feature views it reads, as
	// declared.
	Sources []string
	// Schema are its output features; Exprs[i] computes Schema[i].
	Schema []Field
	Exprs  []string
	Tags   map[string]string
}
