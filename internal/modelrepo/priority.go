package modelrepo

import (
	"slices"

	"github.com/sluice-ml/sluice/internal/apierr"
	"github.com/sluice-ml/sluice/internal/batch"
	"github.com/sluice-ml/sluice/internal/pb/inferencepb"
)

// denseLevels is the most priority levels the batcher is given one queue
// each. A configuration with more (Triton takes any uint64, and its QA
// configures 2^64-1: qa/L0_model_queue test_max_priority_levels) is
// mapped onto fewer queues by priorityMap.
const denseLevels = 1 << 16

// anchorLevels is how many of the highest levels keep a queue of their
// own when the levels are mapped.
const anchorLevels = 1 << 10

// priorityMap maps the priorities of a model's configuration (1 is the
// highest, up to priority_levels) onto the batcher's levels. Up to
// denseLevels it is the identity. Past it, the "anchor" levels (the first
// anchorLevels, every level with a priority_queue_policy and the default
// level) keep a queue each, in order, and the levels between two anchors
// share one queue after the higher anchor, with the default queue policy
// (which is theirs): a request never waits behind one of a lower anchor
// level, and requests of levels between the same two anchors are served
// in arrival order.
type priorityMap struct {
	levels  uint64   // priority_levels; 0: the model has none
	anchors []uint64 // sorted; nil: the identity
}

func newPriorityMap(db *inferencepb.ModelDynamicBatching) priorityMap {
	pm := priorityMap{levels: db.GetPriorityLevels()}
	if pm.levels <= denseLevels {
		return pm
	}
	for l := uint64(1); l <= anchorLevels; l++ {
		pm.anchors = append(pm.anchors, l)
	}
	for l := range db.GetPriorityQueuePolicy() {
		pm.anchors = append(pm.anchors, l)
	}
	pm.anchors = append(pm.anchors, db.GetDefaultPriorityLevel())
	slices.Sort(pm.anchors)
	pm.anchors = slices.Compact(pm.anchors)
	return pm
}

// batchLevels is the number of levels the batcher gets.
func (pm priorityMap) batchLevels() int {
	if pm.anchors == nil {
		return int(pm.levels)
	}
	return 2 * len(pm.anchors)
}

// level maps configured level p (1..levels) to the batcher's (1-based):
// anchor i is 2i+1, the levels after it and before the next anchor 2i+2.
func (pm priorityMap) level(p uint64) int {
	if pm.anchors == nil {
		return int(p)
	}
	i, found := slices.BinarySearch(pm.anchors, p)
	if found {
		return 2*i + 1
	}
	return 2 * i // the gap after anchor i-1 (anchors[0] is 1, so i >= 1)
}

// request maps a request's priority to the batcher's, 0 staying the
// default level. Without levels every priority is the one queue's, as in
// Triton; past priority_levels it is refused.
func (pm priorityMap) request(model string, p uint64) (int, *apierr.Error) {
	switch {
	case p == 0 || pm.levels == 0:
		return 0, nil
	case p > pm.levels:
		return 0, apierr.Errorf(apierr.KindInvalid, batch.ReasonInvalidPriority,
			"priority %d outside [1, %d] for model '%s'", p, pm.levels, model)
	}
	return pm.level(p), nil
}
