package sequence

// The reasons of the *apierr.Error values the scheduler returns (besides
// batch's queue_full, model_unloading, backend_error and the context
// reasons).
const (
	// ReasonMissingCorrelationID: a request to a sequence model has no
	// sequence_id (KindInvalid).
	ReasonMissingCorrelationID = "missing_correlation_id"
	// ReasonSequenceNotStarted: a request of a sequence that is not active
	// (never started, ended, or released after its idle timeout) lacks
	// sequence_start (KindInvalid).
	ReasonSequenceNotStarted = "sequence_not_started"
	// ReasonInvalidCorrelationID: a correlation id of the wrong type for
	// the model's CORRID control (KindInvalid).
	ReasonInvalidCorrelationID = "invalid_correlation_id"
	// ReasonSequenceBatchSize: a request to a batching sequence model with
	// a batch dimension other than 1 (KindInvalid).
	ReasonSequenceBatchSize = "sequence_batch_size"
	// ReasonClientSequenceLimit: a START from a client that already holds
	// Options.MaxSequencesPerClient sequences (KindResourceExhausted: 429,
	// RESOURCE_EXHAUSTED).
	ReasonClientSequenceLimit = "sequence_client_limit"
)
