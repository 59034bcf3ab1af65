// Package batch is the scheduler in front of one model version's instance
// pool: a dynamic batcher with Triton's semantics, priority levels, queue
// policies and ordered release.
//
// # Batching
//
// The batcher never waits to fill MaxBatchSize. Whenever an executor is
// free it looks at the queue in priority order (level 1 first, FIFO within
// a level) and builds the batch the head request would start: requests are
// added in order while their non-batch input shapes match the head's and
// the total batch size stays within MaxBatchSize. A request that does not
// match or does not fit ends the batch; it heads a later one, so requests
// never overtake one another inside a level. From that candidate batch the
// batcher sends
//
//   - the largest prefix whose total is a preferred batch size, at once;
//   - else, when the next request would take the batch past the largest
//     preferred size, the requests before it, at once (the newcomer heads
//     the next batch and waits its own delay), as Triton does;
//   - but neither of these two once the oldest request of the candidate
//     batch has waited MaxQueueDelay (say, behind busy executors): then
//     the whole candidate batch goes, as Triton sends all it has pending;
//   - else the whole candidate batch, at once, when its total already
//     reaches the largest preferred size (waiting cannot make it preferred);
//   - else the whole candidate batch, at once, when it is full, when it
//     cannot grow (the next request does not match or fit), when
//     MaxQueueDelay is 0, or when its oldest request has waited
//     MaxQueueDelay;
//   - else nothing yet: it waits until the oldest request of the candidate
//     batch has waited MaxQueueDelay or an arrival completes a preferred or
//     full batch, whichever comes first.
//
// Requests with a batch dimension above 1 are packed whole and never split
// across executions. Inputs are concatenated along the batch dimension into
// buffers owned by the executor slot and reused from batch to batch; a
// batch of one request passes its tensors to the executor untouched.
// Outputs are split back by rows without copying: each request's output
// Data is a capacity-limited sub-slice of the executor's output buffer.
// BYTES outputs are split by walking the length prefixes.
//
// Ragged batching (Triton's allow_ragged_batch, batch_input and
// batch_output; ragged.go): requests whose shapes differ only in ragged
// inputs (Options.RaggedInputs) share a batch, and the executor gets each
// ragged input flattened into one dimension, [total elements], the
// requests' data concatenated. Options.BatchInputs are computed from the
// batch formed and added to the inputs: each request's element count of a
// source input, their running sums (with or without a leading 0), a tensor
// whose shape is the largest count, and each row's shape (as [rows, rank]
// or flattened). Options.BatchOutputs are split by the shape of a request
// input: each request gets as many elements as its source input has,
// shaped like it. Such a model's batches always take this path, even a
// batch of one.
//
// Requests whose output lists differ share a batch: the executor is asked
// for the union of their outputs and each request gets the ones it named.
//
// # Queue policy
//
// Each priority level has its own QueuePolicy. MaxQueueSize bounds the
// requests waiting at that level; a full level rejects at once with
// reason queue_full. A request that waits longer than its timeout is, with
// Reject, removed and answered queue_timeout; with Delay it stays queued
// but moves behind the requests of its level that have not timed out.
// A request's own Timeout applies only when AllowTimeoutOverride is set and
// only when it lowers the level's DefaultTimeout (or when there is no
// default); a larger value is silently ignored, as in Triton.
//
// Priority: Request.Priority 0 means the default level. When the model sets
// no priority levels (PriorityLevels 0) the priority is ignored, as in
// Triton; otherwise a priority above PriorityLevels (or a negative one) is
// rejected with reason invalid_priority, where Triton would quietly use the
// default level.
//
// # Cancellation and ordering
//
// A request whose context ends while it is queued is removed and never
// executed, and Submit returns at once. Once its batch has started, Submit
// waits for the execution to finish, because the executor may still be
// reading the request's input buffers. A batch of one request is executed
// with the request's own context, so cancelling it can stop the model run;
// larger batches run with a context that ends only when Close gives up.
//
// With PreserveOrdering, Submit calls return in submission order: a result
// that is ready is held until every earlier request has been answered (or
// its caller has gone).
package batch
