package serving

import (
	"github.com/sluice-ml/sluice/internal/apierr"
)

// Reason codes of the errors this package returns. Clients match on them.
// Those every edge shares are wire's.
const (
	ReasonUnknownFeature           = "unknown_feature"
	ReasonUnknownView              = "unknown_feature_view"
	ReasonUnknownService           = "unknown_feature_service"
	ReasonUnknownEntityKey         = "unknown_entity_key"
	ReasonMissingEntityKey         = "missing_entity_key"
	ReasonInvalidEntityValue       = "invalid_entity_value"
	ReasonEntityLengthMismatch     = "entity_length_mismatch"
	ReasonInvalidRequest           = "invalid_request"
	ReasonDuplicateFeature         = "duplicate_feature"
	ReasonFeatureNameCollision     = "feature_name_collision"
	ReasonViewNotOnline            = "feature_view_not_online"
	ReasonViewStale                = "feature_view_stale"
	ReasonEventTimestampTooOld     = "event_timestamp_too_old"
	ReasonStoreUnavailable         = "online_store_unavailable"
	ReasonTooManyEntityRows        = apierr.ReasonTooManyEntityRows
	ReasonRegistryNotLoaded        = "registry_not_loaded"
	ReasonUnknownPushSource        = "unknown_push_source"
	ReasonMissingColumn            = "missing_column"
	ReasonInvalidColumnValue       = "invalid_column_value"
	ReasonPushOfflineNeedsFolder   = "push_offline_needs_folder_source"
	ReasonPushOfflineNoBatchSource = "push_offline_no_batch_source"
	ReasonOfflineWriteFailed       = "offline_write_failed"
	ReasonMaterializeUnavailable   = "materialize_unavailable"
	ReasonTimestampInFuture        = "timestamp_in_future"
	ReasonInternal                 = apierr.ReasonInternal
)

func invalidf(reason, format string, args ...any) *apierr.Error {
	return apierr.Errorf(apierr.KindInvalid, reason, format, args...)
}

func unavailablef(reason, format string, args ...any) *apierr.Error {
	return apierr.Errorf(apierr.KindUnavailable, reason, format, args...)
}
