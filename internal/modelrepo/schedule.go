package modelrepo

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// closeBatcherTimeout bounds how long closing a drained version's batcher
// may take. The version has no request left by then, so Close only stops
// its goroutines.
const closeBatcherTimeout = 10 * time.Second

// spinBelow is batch.Options.SpinBelow for dynamic batching: a little more
// than the ~1.1 ms timer lateness measured on idle Linux VMs.
const spinBelow = 1500 * time.Microsecond

// schedulerOptions turns a version's configuration into its batcher's
// options. Without dynamic_batching every request runs alone, still
// through the queue and the instance pool.
func schedulerOptions(model, version string, cfg *inferencepb.ModelConfig) batch.Options {
	o := batch.Options{Model: model, Version: version, MaxBatchSize: int(cfg.GetMaxBatchSize())}
	for _, in := range cfg.GetInput() {
		if in.GetAllowRaggedBatch() {
			if o.RaggedInputs == nil {
				o.RaggedInputs = map[string]bool{}
			}
			o.RaggedInputs[in.GetName()] = true
		}
	}
	for _, bi := range cfg.GetBatchInput() {
		o.BatchInputs = append(o.BatchInputs, batch.BatchInput{
			Kind:     batch.BatchInputKind(bi.GetKind()), // the same order as Triton's enum
			Targets:  bi.GetTargetName(),
			DataType: modelconfig.ToInfer(bi.GetDataType()),
			Source:   firstOf(bi.GetSourceInput()),
		})
	}
	for _, bo := range cfg.GetBatchOutput() {
		o.BatchOutputs = append(o.BatchOutputs, batch.BatchOutput{Targets: bo.GetTargetName(), Source: firstOf(bo.GetSourceInput())})
	}
	db := cfg.GetDynamicBatching()
	if db == nil {
		return o
	}
	o.Dynamic = true
	for _, s := range db.GetPreferredBatchSize() {
		o.PreferredBatchSizes = append(o.PreferredBatchSizes, int(s))
	}
	o.MaxQueueDelay = microseconds(db.GetMaxQueueDelayMicroseconds())
	// Go timers fire up to ~1 ms late on an idle machine; spin the last
	// stretch so a 100–500 µs max_queue_delay means what it says.
	o.SpinBelow = spinBelow
	o.PreserveOrdering = db.GetPreserveOrdering()
	// The configuration's levels go through the same map as the
	// requests' priorities (priorityMap).
	pm := newPriorityMap(db)
	o.PriorityLevels = pm.batchLevels()
	if d := db.GetDefaultPriorityLevel(); d > 0 && d <= pm.levels {
		o.DefaultPriority = pm.level(d)
	}
	o.DefaultQueuePolicy = queuePolicy(db.GetDefaultQueuePolicy())
	for level, qp := range db.GetPriorityQueuePolicy() {
		if level < 1 || level > pm.levels {
			continue // modelconfig.Validate refuses these
		}
		if o.PriorityQueuePolicy == nil {
			o.PriorityQueuePolicy = map[int]batch.QueuePolicy{}
		}
		o.PriorityQueuePolicy[pm.level(level)] = queuePolicy(qp)
	}
	return o
}

// firstOf returns the first element of names, or "" (modelconfig.Validate
// requires exactly one source input).
func firstOf(names []string) string {
	if len(names) == 0 {
		return ""
	}
	return names[0]
}

// queuePolicy converts Triton's ModelQueuePolicy.
func queuePolicy(qp *inferencepb.ModelQueuePolicy) batch.QueuePolicy {
	p := batch.QueuePolicy{
		DefaultTimeout:       microseconds(qp.GetDefaultTimeoutMicroseconds()),
		AllowTimeoutOverride: qp.GetAllowTimeoutOverride(),
		MaxQueueSize:         int(qp.GetMaxQueueSize()),
	}
	if qp.GetTimeoutAction() == inferencepb.ModelQueuePolicy_DELAY {
		p.TimeoutAction = batch.Delay
	}
	return p
}

// microseconds converts a config duration, saturating instead of
// overflowing.
func microseconds(us uint64) time.Duration {
	if us > uint64(math.MaxInt64/int64(time.Microsecond)) {
		return math.MaxInt64
	}
	return time.Duration(us) * time.Microsecond
}

// statsObserver feeds a version's executed batches into its statistics
// (execution_count and batch_stats) and its executions counter. The
// batcher calls it only for requests, which reach a version after it was
// published, so lv.stats is set by then.
type statsObserver struct{ lv *loaded }

// Executed records one executed batch.
func (o statsObserver) Executed(batchSize int, input, compute, output time.Duration) {
	o.lv.obs.executions.Inc()
	o.lv.obs.triton.executed()
	o.lv.stats.executed(uint64(batchSize), input, compute, output)
}

// startScheduler builds the version's batcher over all its instances.
func (m *Manager) startScheduler(lv *loaded) error {
	execs := make([]batch.Executor, len(lv.instances))
	for i, in := range lv.instances {
		execs[i] = in
	}
	if lv.cfg.GetSequenceBatching() != nil {
		return m.startSequenceScheduler(lv, execs)
	}
	opts := schedulerOptions(lv.model, lv.vstr, lv.cfg)
	opts.HoldUntilQueued = m.opts.HoldSchedulerUntil
	b, err := batch.New(opts, execs, statsObserver{lv}, m.batchMetrics, m.logger)
	if err != nil {
		return err
	}
	lv.batcher = b
	lv.priorities = newPriorityMap(lv.cfg.GetDynamicBatching())
	return nil
}

// execute runs validated inputs through the version's batcher and returns
// the request's outputs and its share of the times.
func (lv *loaded) execute(ctx context.Context, inputs []infer.Tensor, outputs []string, batchSize int64, sched schedParams) ([]infer.Tensor, execTimes, *apierr.Error) {
	priority, ierr := lv.priorities.request(lv.model, sched.priority)
	if ierr != nil {
		return nil, execTimes{}, ierr
	}
	res, err := lv.batcher.Submit(ctx, &batch.Request{
		Inputs:    inputs,
		Outputs:   outputs,
		BatchSize: int(batchSize),
		Priority:  priority,
		Timeout:   sched.timeout,
		Params:    sched.model,
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, execTimes{}, ctxError(ctx)
		}
		return nil, execTimes{}, lv.backendError(ctx, err)
	}
	// Fewer outputs than asked for is a Python model answering with a
	// subset, which Triton passes on; the outputs carry their names.
	if len(res.Outputs) > len(outputs) {
		return nil, execTimes{}, apierr.Errorf(apierr.KindInternal, ReasonBackendError,
			"model '%s' version %d returned %d outputs, want at most %d", lv.model, lv.version, len(res.Outputs), len(outputs))
	}
	return res.Outputs, execTimes{queue: res.QueueTime, input: res.InputTime, infer: res.ComputeTime, output: res.OutputTime}, nil
}

// shutdown stops a version that no request holds any more: its batcher,
// then its instances.
func (lv *loaded) shutdown() error {
	var errs []error
	if lv.batcher != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeBatcherTimeout)
		errs = append(errs, lv.batcher.Close(ctx))
		cancel()
	}
	if lv.seq != nil {
		ctx, cancel := context.WithTimeout(context.Background(), closeBatcherTimeout)
		errs = append(errs, lv.seq.Close(ctx))
		cancel()
	}
	errs = append(errs, lv.closeInstances())
	return errors.Join(errs...)
}
