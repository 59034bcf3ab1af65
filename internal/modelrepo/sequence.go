package modelrepo

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/authz"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/batch/sequence"
	"github.com/sluice-ml/sluice/internal/infer"
	"github.com/sluice-ml/sluice/internal/modelconfig"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// Request parameters of a sequence, as Triton names them.
const (
	paramSequenceID    = "sequence_id"    // uint64 or string correlation id
	paramSequenceStart = "sequence_start" // bool
	paramSequenceEnd   = "sequence_end"   // bool
)

// Sluice's config.pbtxt parameters of a sequence model (string values):
// the most sequences one client holds at once, and how long a sequence of
// a client above its fair share of slots may stay idle while another
// client waits for one.
const (
	ParamMaxSequencesPerClient = "sluice.max_sequences_per_client"
	ParamContendedIdleUS       = "sluice.sequence_contended_idle_microseconds"
)

// initialStateDir is the folder of a version that holds initial_state
// data files, as in Triton.
const initialStateDir = "initial_state"

// maxInitialStateBytes bounds an initial_state data file.
const maxInitialStateBytes = 64 << 20

// startSequenceScheduler builds the sequence batcher of a version whose
// config has sequence_batching.
func (m *Manager) startSequenceScheduler(lv *loaded, execs []batch.Executor) error {
	opts, err := sequenceOptions(lv.model, lv.vstr, lv.cfg, filepath.Join(lv.dir, lv.vstr))
	if err != nil {
		return err
	}
	opts.HoldUntilQueued, opts.HoldUntilBacklogged = m.opts.HoldSchedulerUntil, m.opts.HoldBacklogUntil
	s, err := sequence.New(opts, execs, statsObserver{lv}, m.seqMetrics, m.logger)
	if err != nil {
		return err
	}
	lv.seq = s
	return nil
}

// sequenceOptions turns sequence_batching into the scheduler's options.
// vdir is the version folder (initial_state data files live under it).
func sequenceOptions(model, version string, cfg *inferencepb.ModelConfig, vdir string) (sequence.Options, error) {
	sb := cfg.GetSequenceBatching()
	o := sequence.Options{
		Model: model, Version: version,
		MaxBatchSize: int(cfg.GetMaxBatchSize()),
		IdleTimeout:  microseconds(sb.GetMaxSequenceIdleMicroseconds()),
	}
	if oldest := sb.GetOldest(); oldest != nil {
		o.Strategy = sequence.Oldest
		o.MaxCandidates = int(oldest.GetMaxCandidateSequences())
		o.MaxQueueDelay = microseconds(oldest.GetMaxQueueDelayMicroseconds())
		for _, n := range oldest.GetPreferredBatchSize() {
			o.PreferredBatchSizes = append(o.PreferredBatchSizes, int(n))
		}
	} else {
		o.MaxQueueDelay = microseconds(sb.GetDirect().GetMaxQueueDelayMicroseconds())
		o.MinSlotUtilization = float64(sb.GetDirect().GetMinimumSlotUtilization())
	}
	for _, key := range []string{ParamMaxSequencesPerClient, ParamContendedIdleUS} {
		pv, ok := cfg.GetParameters()[key]
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(pv.GetStringValue()), 10, 64)
		if err != nil || n < 0 || n > math.MaxInt32 {
			return o, fmt.Errorf("parameters: %s is %q, want a whole number from 0 to %d (0: the default)", key, pv.GetStringValue(), math.MaxInt32)
		}
		if key == ParamMaxSequencesPerClient {
			o.MaxSequencesPerClient = int(n)
		} else {
			o.ContendedIdleTimeout = time.Duration(n) * time.Microsecond
		}
	}
	for _, ci := range sb.GetControlInput() {
		for _, c := range ci.GetControl() {
			ctl := sequence.Control{Input: ci.GetName(), DataType: modelconfig.ToInfer(modelconfig.SequenceControlType(c))}
			switch c.GetKind() {
			case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_START:
				ctl.Kind = sequence.ControlStart
			case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_END:
				ctl.Kind = sequence.ControlEnd
			case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_READY:
				ctl.Kind = sequence.ControlReady
			case inferencepb.ModelSequenceBatching_Control_CONTROL_SEQUENCE_CORRID:
				ctl.Kind = sequence.ControlCorrID
			}
			switch {
			case len(c.GetInt32FalseTrue()) == 2:
				v := c.GetInt32FalseTrue()
				ctl.False = binary.LittleEndian.AppendUint32(nil, uint32(v[0]))
				ctl.True = binary.LittleEndian.AppendUint32(nil, uint32(v[1]))
			case len(c.GetFp32FalseTrue()) == 2:
				v := c.GetFp32FalseTrue()
				ctl.False = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v[0]))
				ctl.True = binary.LittleEndian.AppendUint32(nil, math.Float32bits(v[1]))
			case len(c.GetBoolFalseTrue()) == 2:
				v := c.GetBoolFalseTrue()
				ctl.False, ctl.True = []byte{boolByte(v[0])}, []byte{boolByte(v[1])}
			}
			o.Controls = append(o.Controls, ctl)
		}
	}
	for _, st := range sb.GetState() {
		s := sequence.State{
			Input: st.GetInputName(), Output: st.GetOutputName(),
			DataType: modelconfig.ToInfer(st.GetDataType()),
			Dims:     infer.Shape(st.GetDims()).Clone(),
		}
		// Without an initial_state, a sequence starts from zeros with 1
		// for each variable dimension, as Triton does (qa/L0_implicit_state
		// trial v: states of dims [-1]).
		for i, d := range s.Dims {
			if d < 0 {
				s.Dims[i] = 1
			}
		}
		if is := st.GetInitialState(); len(is) > 0 {
			s.Dims = infer.Shape(is[0].GetDims()).Clone()
			if f := is[0].GetDataFile(); f != "" {
				data, err := readInitialState(vdir, f)
				if err != nil {
					return o, fmt.Errorf("sequence_batching: state '%s': %w", s.Input, err)
				}
				s.Initial = data
			}
		}
		o.States = append(o.States, s)
	}
	return o, nil
}

// readInitialState reads an initial_state data_file from the version's
// initial_state folder; the name may not leave it.
func readInitialState(vdir, name string) ([]byte, error) {
	rel := filepath.Clean(name)
	if filepath.IsAbs(rel) || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, fmt.Errorf("initial_state data_file %q is outside the %s folder", name, initialStateDir)
	}
	path := filepath.Join(vdir, initialStateDir, rel)
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("initial_state data_file: %w", err)
	}
	if fi.Size() > maxInitialStateBytes {
		return nil, fmt.Errorf("initial_state data_file %q holds %d bytes, more than %d", name, fi.Size(), maxInitialStateBytes)
	}
	return os.ReadFile(path)
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// sequenceParams reads a request's correlation id and flags.
func sequenceParams(p infer.Parameters) (id sequence.CorrID, start, end bool, ierr *apierr.Error) {
	bad := func(name string, v any, want string) *apierr.Error {
		return apierr.Errorf(apierr.KindInvalid, ReasonInvalidParameter, "request parameter '%s' must be %s, got %v", name, want, v)
	}
	if v, ok := p[paramSequenceID]; ok {
		switch x := v.(type) {
		case string:
			id.Str = x
		case int64:
			if x < 0 {
				return id, false, false, bad(paramSequenceID, v, "a non-negative integer or a string")
			}
			id.Num = uint64(x)
		case uint64:
			id.Num = x
		default:
			return id, false, false, bad(paramSequenceID, v, "a non-negative integer or a string")
		}
	}
	flag := func(name string) (bool, *apierr.Error) {
		v, ok := p[name]
		if !ok {
			return false, nil
		}
		b, isBool := v.(bool)
		if !isBool {
			return false, bad(name, v, "a boolean")
		}
		return b, nil
	}
	if start, ierr = flag(paramSequenceStart); ierr != nil {
		return id, false, false, ierr
	}
	end, ierr = flag(paramSequenceEnd)
	return id, start, end, ierr
}

// executeSequence runs validated inputs through the version's sequence
// batcher.
func (lv *loaded) executeSequence(ctx context.Context, inputs []infer.Tensor, outputs []string, params infer.Parameters) ([]infer.Tensor, execTimes, *apierr.Error) {
	id, start, end, ierr := sequenceParams(params)
	if ierr != nil {
		return nil, execTimes{}, ierr
	}
	res, err := lv.seq.Submit(ctx, &sequence.Request{Inputs: inputs, Outputs: outputs, ID: id, Start: start, End: end, Client: sequenceClient(ctx)})
	if err != nil {
		if ctx.Err() != nil {
			return nil, execTimes{}, ctxError(ctx)
		}
		return nil, execTimes{}, lv.backendError(ctx, err)
	}
	return res.Outputs, execTimes{queue: res.QueueTime, input: res.InputTime, infer: res.ComputeTime, output: res.OutputTime}, nil
}

// sequenceResponseParams are the sequence parameters an ensemble's
// response carries, as Triton's ensemble scheduler answers them (over
// HTTP, gRPC and the gRPC stream): the request's correlation id (0 when it
// had none; a string id stays a string) and its start and end flags.
func sequenceResponseParams(p infer.Parameters) infer.Parameters {
	out := infer.Parameters{paramSequenceID: uint64(0), paramSequenceStart: false, paramSequenceEnd: false}
	id, start, end, ierr := sequenceParams(p)
	if ierr != nil {
		return out
	}
	if id.Str != "" {
		out[paramSequenceID] = id.Str
	} else {
		out[paramSequenceID] = id.Num
	}
	out[paramSequenceStart], out[paramSequenceEnd] = start, end
	return out
}

// sequenceClient names the caller a sequence's slots are counted against
// (sequence.Options.MaxSequencesPerClient): the credential's identity
// (token id or client certificate) when it presented one, else its
// network address without the port (an anonymous caller opening many
// connections is still one client). A call with no caller in its context
// (none reaches a model server's listeners) is "", which no cap applies
// to. Behind a proxy that does not forward identities every anonymous
// client is the proxy's address.
func sequenceClient(ctx context.Context) string {
	pr, ok := authz.PrincipalFrom(ctx)
	if !ok {
		return ""
	}
	if pr.Via == authz.ViaToken || pr.Via == authz.ViaMTLS {
		return "id:" + pr.ID
	}
	host, _, err := net.SplitHostPort(pr.Addr)
	if err != nil {
		host = pr.Addr
	}
	return "addr:" + host
}
