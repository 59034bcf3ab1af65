// Package sequence is Triton's sequence batcher for stateful models: the
// scheduler of a model version whose config has sequence_batching.
//
// Every request names its sequence by a correlation id (a non-zero number
// or a non-empty string) and carries the sequence_start and sequence_end
// flags. A sequence holds a slot from its first request (which must carry
// START) until its END request has run or it received nothing for
// IdleTimeout; later requests of a released sequence without START are
// refused with sequence_not_started. A sequence's requests run one at a
// time, in arrival order. When every slot is taken, new sequences wait in
// a bounded backlog (MaxBacklog; beyond it queue_full) and take slots as
// they free, in order.
//
// Strategies. Direct pins a sequence to one row of one instance (slots =
// max(max_batch_size, 1) per instance): an execution has one row per slot
// up to the highest slot holding a sequence, and rows of slots with nothing
// to run are zero-filled with READY false. With MaxQueueDelay, an
// execution waits until MinSlotUtilization of the instance's slots
// have a request or its oldest request waited that long. Oldest keeps up
// to MaxCandidates sequences active and fills each execution with the
// oldest waiting requests, at most one per sequence, sending at once when
// it reaches a preferred size or the largest one, or when MaxQueueDelay is
// 0, else after the oldest waited MaxQueueDelay.
//
// The scheduler fills the control inputs (START, END, READY with the
// configured false/true values; CORRID with the id, a numeric id written
// as decimal digits to a BYTES control) and the implicit states: a
// state's input gets the sequence's previous value of the state's output,
// the initial value (zeros unless given) on a START request. State lives
// in the scheduler, per sequence, and is dropped when the sequence ends.
//
// Requests to a batching model have batch size 1, as in Triton.
package sequence
