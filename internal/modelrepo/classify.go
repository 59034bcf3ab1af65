package modelrepo

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/classify"
	"github.com/sluice-ml/sluice/internal/infer"
)

// paramClassification is the requested-output parameter of Triton's
// classification extension: the number of top classes to return.
const paramClassification = "classification"

// maxLabelFileBytes bounds a label_filename file.
const maxLabelFileBytes = 16 << 20

// readLabels loads the label_filename of each output that names one, one
// label per line, from the model folder (as Triton reads it).
func (lv *loaded) readLabels() error {
	for _, out := range lv.cfg.GetOutput() {
		name := out.GetLabelFilename()
		if name == "" {
			continue
		}
		rel := filepath.FromSlash(name)
		if !filepath.IsLocal(rel) {
			return fmt.Errorf("output '%s': label_filename %q must be a path inside the model folder", out.GetName(), name)
		}
		f, err := os.Open(filepath.Join(lv.dir, rel))
		if err != nil {
			return fmt.Errorf("output '%s': label_filename: %w", out.GetName(), err)
		}
		data, err := io.ReadAll(io.LimitReader(f, maxLabelFileBytes+1))
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("output '%s': label_filename: %w", out.GetName(), err)
		}
		if len(data) > maxLabelFileBytes {
			return fmt.Errorf("output '%s': label_filename %s is larger than %d bytes", out.GetName(), name, maxLabelFileBytes)
		}
		var labels []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, maxLabelFileBytes)
		for sc.Scan() {
			labels = append(labels, string(bytes.TrimSuffix(sc.Bytes(), []byte("\r"))))
		}
		if lv.labels == nil {
			lv.labels = map[string][]string{}
		}
		lv.labels[out.GetName()] = labels
	}
	return nil
}

// classifications reads the classification parameter of the requested
// outputs: output name -> count. Nil when no output asks for one.
func (lv *loaded) classifications(req *infer.Request) (map[string]int, *apierr.Error) {
	var out map[string]int
	for _, o := range req.Outputs {
		v, ok := o.Parameters[paramClassification]
		if !ok {
			continue
		}
		n, ok := paramUint(v)
		if !ok || n < 1 || n > 1<<31 {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidParameter, "output '%s': parameter '%s' must be a positive integer, got %v", o.Name, paramClassification, v)
		}
		if dt := lv.outputType(o.Name); dt != infer.Invalid && !classify.Supported(dt) {
			// Triton's words, which its QA test looks for (qa/L0_parameters
			// test_classificattion_unsupported_data_type), then ours.
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidParameter, "output '%s': class result not available for output due to unsupported type '%s'; classification needs a numeric output", o.Name, dt)
		}
		if out == nil {
			out = map[string]int{}
		}
		out[o.Name] = int(n)
	}
	return out, nil
}

// outputType is the config data type of an output, Invalid when unknown.
func (lv *loaded) outputType(name string) infer.DataType {
	for _, s := range lv.client.Outputs {
		if s.Name == name {
			return s.DataType
		}
	}
	return infer.Invalid
}

// classify replaces the outputs named in counts by their top classes.
// outs may be shared (the response cache holds them), so it returns a new
// slice.
func (lv *loaded) classify(outs []infer.Tensor, counts map[string]int) ([]infer.Tensor, *apierr.Error) {
	if len(counts) == 0 {
		return outs, nil
	}
	res := make([]infer.Tensor, len(outs))
	for i, t := range outs {
		k, ok := counts[t.Name]
		if !ok {
			res[i] = t
			continue
		}
		c, err := classify.TopK(t, k, lv.maxBatch > 0, lv.labelsFor(t.Name, 0))
		if err != nil {
			return nil, apierr.Errorf(apierr.KindInvalid, ReasonInvalidParameter, "model '%s': classification: %v", lv.model, err)
		}
		res[i] = c
	}
	return res, nil
}

// labelsFor returns the labels of an output: those of its own
// label_filename, else, for an ensemble, those of the step output that
// produces it, through nested ensembles, as Triton looks labels up in the
// model that made the tensor (QA L0_infer test_ensemble_label_lookup).
// The steps are the versions the ensemble last checked before serving.
func (lv *loaded) labelsFor(name string, depth int) []string {
	if l := lv.labels[name]; l != nil || lv.ens == nil || depth >= maxEnsembleDepth {
		return l
	}
	c := lv.ens.checked.Load()
	if c == nil {
		return nil
	}
	for i, st := range lv.ens.steps {
		for _, o := range st.out {
			if lv.ens.tensors[o.tensor] == name && i < len(c.steps) && c.steps[i] != nil {
				return c.steps[i].labelsFor(o.name, depth+1)
			}
		}
	}
	return nil
}
