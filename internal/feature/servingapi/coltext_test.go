package servingapi

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/sluice-ml/sluice/internal/feature"
	"github.com/sluice-ml/sluice/internal/feature/serving"
)

// TestAppendResponseCopiesSharedColumns writes answers whose columns
// share their statuses and timestamps with the column before them (a
// view's features, all present), and whose columns differ from the one
// before in one row only (a feature missing or stale for one entity, a
// timestamp one nanosecond apart, a timestamp equal in another zone), and
// checks the bytes against the plain reference encoder: a copied column
// must be exactly what writing it would give.
func TestAppendResponseCopiesSharedColumns(t *testing.T) {
	for _, rows := range []int{0, 1, 5, 40} {
		resp := &serving.Response{}
		stamps := func(view int) []time.Time {
			ts := make([]time.Time, rows)
			for r := range ts {
				ts[r] = now.Add(-time.Duration(r+view)*time.Minute - time.Duration(r)*time.Millisecond)
			}
			return ts
		}
		add := func(name string, sts []serving.Status, ts []time.Time) {
			vals := make([]feature.Value, len(sts))
			for r := range vals {
				vals[r] = feature.Value{F64: float64(float32(float64(r)/3 + float64(len(resp.Results))))}
			}
			resp.FeatureNames = append(resp.FeatureNames, name)
			resp.Types = append(resp.Types, feature.Type{Kind: feature.KindFloat32})
			resp.Results = append(resp.Results, serving.Column{Values: vals, Statuses: sts, EventTimestamps: ts})
		}
		present := func() []serving.Status {
			sts := make([]serving.Status, rows)
			for r := range sts {
				sts[r] = serving.StatusPresent
			}
			return sts
		}
		for view := range 3 {
			for f := range 4 {
				sts, ts := present(), stamps(view)
				if rows > 0 {
					switch f {
					case 1: // one entity's value missing: another status, the epoch
						sts[rows-1], ts[rows-1] = serving.StatusNotFound, epoch
					case 2: // one timestamp a nanosecond later
						ts[0] = ts[0].Add(time.Nanosecond)
					case 3: // the same instants in another zone: written alike
						for r := range ts {
							ts[r] = ts[r].In(time.FixedZone("x", 3600))
						}
					default:
					}
				}
				add("v"+strconv.Itoa(view)+":f"+strconv.Itoa(f), sts, ts)
				add("v"+strconv.Itoa(view)+":g"+strconv.Itoa(f), sts, ts) // shares both with the column before
			}
		}
		require.Equal(t, refResponse(resp), string(appendResponse(nil, resp)), "%d rows", rows)
	}
}
