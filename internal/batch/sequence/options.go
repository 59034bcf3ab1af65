package sequence

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/sluice-ml/sluice/internal/infer"
)

// Strategy is how sequences share the model's batches.
type Strategy uint8

// The strategies of Triton's sequence batcher.
const (
	// Direct pins each sequence to one batch slot of one instance for its
	// whole life: its requests always run in that row of that instance's
	// batches. Rows of slots with nothing to run are sent with READY
	// false.
	Direct Strategy = iota
	// Oldest keeps up to MaxCandidates sequences active and batches the
	// oldest waiting requests across them, at most one per sequence per
	// batch, on any free instance.
	Oldest
)

func (s Strategy) String() string {
	if s == Oldest {
		return "oldest"
	}
	return "direct"
}

// ControlKind is which signal a control tensor carries.
type ControlKind uint8

// Triton's control kinds.
const (
	// ControlStart is true on the first request of a sequence.
	ControlStart ControlKind = iota
	// ControlEnd is true on the last request of a sequence.
	ControlEnd
	// ControlReady is true in every row that holds a request.
	ControlReady
	// ControlCorrID carries the sequence's correlation id.
	ControlCorrID
)

// Control is one control tensor the scheduler fills for every row.
type Control struct {
	Kind ControlKind
	// Input is the model input that receives it.
	Input    string
	DataType infer.DataType
	// False and True are one element each in the wire layout (not used by
	// ControlCorrID, whose DataType is an integer type or BYTES).
	False, True []byte
}

// State is an implicit state: the model's Output of one request is fed
// back as its Input on the sequence's next request.
type State struct {
	Input, Output string
	DataType      infer.DataType
	// Dims are one sequence's state, without the batch dimension; all
	// concrete.
	Dims infer.Shape
	// Initial is the state a sequence starts from (wire layout: BYTES
	// elements length-prefixed); nil means zeros (empty strings for
	// BYTES).
	Initial []byte
}

// Options configure one model version's sequence scheduler.
type Options struct {
	Model, Version string // metric labels and error messages
	Strategy       Strategy
	// MaxBatchSize is the model's max_batch_size; 0 means requests and
	// control tensors have no batch dimension and each execution runs one
	// request.
	MaxBatchSize int
	// MaxCandidates is the Oldest strategy's max_candidate_sequences; 0
	// means MaxBatchSize (at least 1) per instance.
	MaxCandidates int
	// PreferredBatchSizes (Oldest) are sent at once when reached.
	PreferredBatchSizes []int
	// MaxQueueDelay is how long a batch may wait for more rows: Oldest,
	// until it is full or preferred; Direct, until MinSlotUtilization of
	// the instance's slots (max(MaxBatchSize, 1), active or not) have a
	// request, as in Triton.
	MaxQueueDelay      time.Duration
	MinSlotUtilization float64
	// IdleTimeout frees the slot of a sequence that received no request
	// for that long; later requests of it without START are refused.
	IdleTimeout time.Duration
	Controls    []Control
	States      []State
	// MaxBacklog bounds the sequences waiting for a free slot; a new
	// sequence beyond it is refused with queue_full. 0 means
	// DefaultMaxBacklog.
	MaxBacklog int
	// MaxQueuedPerSequence bounds the requests of one sequence waiting to
	// run; 0 means DefaultMaxQueuedPerSequence.
	MaxQueuedPerSequence int
	// MaxSequencesPerClient bounds the sequences one client (Request.Client)
	// holds at once, in slots or waiting for one; its START beyond it is
	// refused with sequence_client_limit. 0 means
	// DefaultMaxSequencesPerClient of the slots. Requests without a client
	// are not counted against any.
	MaxSequencesPerClient int
	// ContendedIdleTimeout frees, while a client holding fewer slots than
	// its fair share (the slots divided among the clients holding or
	// waiting for one) waits for a slot, the slots of clients above their
	// share whose sequences received nothing for that long; later requests
	// of such a sequence without START are refused. 0 means
	// min(IdleTimeout, DefaultContendedIdleTimeout).
	ContendedIdleTimeout time.Duration
	// HoldUntilQueued and HoldUntilBacklogged are Triton's
	// TRITONSERVER_DELAY_SCHEDULER and TRITONSERVER_BACKLOG_DELAY_SCHEDULER
	// test hooks: nothing executes until the sequences holding slots have
	// HoldUntilQueued requests queued between them and the backlogged
	// sequences HoldUntilBacklogged; from then on the scheduler runs as
	// usual. 0 and 0 turn the hold off; Close ends it.
	HoldUntilQueued, HoldUntilBacklogged int
}

// Defaults of the bounds.
const (
	DefaultMaxBacklog           = 1024
	DefaultMaxQueuedPerSequence = 256
	DefaultContendedIdleTimeout = time.Second
)

// DefaultMaxSequencesPerClient is the per-client bound for a model with
// slots slots: four times the slots, at least 16, so one client may still
// fill every slot and keep a backlog (Triton's QA runs many sequences
// from one client), while a flood of STARTs is refused early.
func DefaultMaxSequencesPerClient(slots int) int { return max(4*slots, 16) }

// MaxStringIDBytes bounds a string correlation id, as Triton bounds the
// ids it passes to a CORRID control of TYPE_STRING.
const MaxStringIDBytes = 128

// validate checks the options for a scheduler with executors executors,
// reporting every problem.
func (o *Options) validate(executors int) error {
	var errs []error
	if executors == 0 {
		errs = append(errs, errors.New("no executors"))
	}
	if o.MaxBatchSize < 0 {
		errs = append(errs, fmt.Errorf("max batch size %d is negative", o.MaxBatchSize))
	}
	if o.MaxCandidates < 0 || o.MaxBacklog < 0 || o.MaxQueuedPerSequence < 0 || o.HoldUntilQueued < 0 || o.HoldUntilBacklogged < 0 ||
		o.MaxSequencesPerClient < 0 || o.ContendedIdleTimeout < 0 {
		errs = append(errs, errors.New("negative bound"))
	}
	if o.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("idle timeout %s must be positive", o.IdleTimeout))
	}
	if o.MaxQueueDelay < 0 {
		errs = append(errs, fmt.Errorf("max queue delay %s is negative", o.MaxQueueDelay))
	}
	for _, n := range o.PreferredBatchSizes {
		if n < 1 || n > max(o.MaxBatchSize, 1) {
			errs = append(errs, fmt.Errorf("preferred batch size %d outside [1, %d]", n, max(o.MaxBatchSize, 1)))
		}
	}
	for _, c := range o.Controls {
		if err := c.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range o.States {
		if err := s.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// validate checks a control input: a correlation id's data type, or that
// a control's false and true values fit its data type.
func (c *Control) validate() error {
	if c.Kind == ControlCorrID {
		switch c.DataType {
		case infer.Uint64, infer.Int64, infer.Uint32, infer.Int32, infer.Bytes:
			return nil
		default:
			return fmt.Errorf("control input '%s': correlation id data type %s is not UINT64, INT64, UINT32, INT32 or BYTES", c.Input, c.DataType)
		}
	}
	if sz := c.DataType.Size(); sz == 0 || len(c.False) != sz || len(c.True) != sz {
		return fmt.Errorf("control input '%s': false/true values do not fit data type %s", c.Input, c.DataType)
	}
	return nil
}

// validate checks a state: concrete dims, a supported data type, and an
// initial value (if any) that fills the dims.
func (s *State) validate() error {
	n, err := s.Dims.Elements()
	switch {
	case err != nil || slicesHasNeg(s.Dims):
		return fmt.Errorf("state '%s': dims %s must be concrete", s.Input, s.Dims)
	case !s.DataType.Valid():
		return fmt.Errorf("state '%s': data type %s is not supported", s.Input, s.DataType)
	case s.DataType == infer.Bytes && s.Initial != nil:
		if els, err := infer.SplitBytes(s.Initial); err != nil || len(els) != n {
			return fmt.Errorf("state '%s': initial value does not hold %d serialized strings (dims %s)", s.Input, n, s.Dims)
		}
	case s.DataType != infer.Bytes && s.Initial != nil && len(s.Initial) != n*s.DataType.Size():
		return fmt.Errorf("state '%s': initial value has %d bytes, dims %s of %s need %d", s.Input, len(s.Initial), s.Dims, s.DataType, n*s.DataType.Size())
	}
	return nil
}

func slicesHasNeg(s infer.Shape) bool {
	for _, d := range s {
		if d < 0 {
			return true
		}
	}
	return false
}

// CorrID is a sequence's correlation id: a non-zero number or a non-empty
// string (exactly one of them is set).
type CorrID struct {
	Num uint64
	Str string
}

// IsZero reports whether no id is set.
func (c CorrID) IsZero() bool { return c.Num == 0 && c.Str == "" }

// String formats the id for messages.
func (c CorrID) String() string {
	if c.Str != "" {
		return strconv.Quote(c.Str)
	}
	return strconv.FormatUint(c.Num, 10)
}
