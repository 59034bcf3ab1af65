package registry

// Reason codes of this package's errors; each is a row of the table in
// package apierr (apierr.Codes).
const (
	// ReasonInvalidFeatureRef: a feature reference that is not view:feature, or both features and feature_service given.
	ReasonInvalidFeatureRef = "invalid_feature_ref"
	// ReasonNoFeatures: a request naming no features and no feature service.
	ReasonNoFeatures = "no_features"
	// ReasonUnknownFeature: a feature its view does not have.
	ReasonUnknownFeature = "unknown_feature"
	// ReasonUnknownFeatureService: a feature service that is not defined.
	ReasonUnknownFeatureService = "unknown_feature_service"
	// ReasonUnknownFeatureView: a feature view that is not defined.
	ReasonUnknownFeatureView = "unknown_feature_view"
)
