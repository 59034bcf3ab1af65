//go:build cgo

package onnxruntime

import (
	"fmt"
	"testing"
)

func BenchmarkExecuteParcelETA(b *testing.B) {
	inst := loadModel(b, modelPath("parcel_eta", 2), map[string]string{ParamIntraOpThreads: "1"})
	for _, batch := range []int{1, 32} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			inputs := randomETA(batch, 1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := inst.Execute(b.Context(), inputs, nil); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(batch)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
}
