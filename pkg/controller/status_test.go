package controller

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/gleaner-dev/gleaner/pkg/api/v1alpha1"
	"github.com/gleaner-dev/gleaner/pkg/demand"
	"github.com/gleaner-dev/gleaner/pkg/ledger"
	"github.com/gleaner-dev/gleaner/pkg/round"
)

// A restarted controller reads back the survival record, its recalibration
// and the pool profile it published on the GPUPool, so the probabilities on
// the nodes keep their record and curve and the pool its learned peaks; a
// record that does not add up, or a pool profile out of range, is refused,
// and the rest of the pool is still restored, once even when the restore is
// tried again.
func TestRestoreTakesBackTheSurvivalRecord(t *testing.T) {
	for _, tt := range []struct {
		name   string
		record []v1alpha1.SurvivalRecord
		want   int // counts the planner holds after the restore
		recal  []v1alpha1.RecalibrationRecord
		recals int // recalibration counts it holds after the restore
		pool   string
		same   bool // the planner's pool profile is pool after the restore
	}{
		{"its own record", []v1alpha1.SurvivalRecord{{NeededAtPercent: 110, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 800, Survived1h: 760, Given4h: 800, Survived4h: 200}}, {JudgedCounts: v1alpha1.JudgedCounts{Given4h: 96, Survived4h: 90}}}, 2,
			[]v1alpha1.RecalibrationRecord{{LogOddsMilli: -1442, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 500, Survived1h: 200}}, {LogOddsMilli: 2464, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 9000, Survived1h: 8000, Given4h: 7000, Survived4h: 5000}}}, 2, poolProfile(0.5), true},
		{"more survived than given", []v1alpha1.SurvivalRecord{{NeededAtPercent: 110, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 8, Survived1h: 9}}}, 0,
			[]v1alpha1.RecalibrationRecord{{LogOddsMilli: 2464, JudgedCounts: v1alpha1.JudgedCounts{Given4h: 7, Survived4h: 8}}}, 0, poolProfile(1.5), false},
		{"a level and a band it does not know", []v1alpha1.SurvivalRecord{{NeededAtPercent: 120, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 8}}}, 0,
			[]v1alpha1.RecalibrationRecord{{LogOddsMilli: 2400, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 9}}}, 0, "", false},
		{"its own survival record, a recalibration that does not add up", []v1alpha1.SurvivalRecord{{NeededAtPercent: 110, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 800, Survived1h: 760}}, {JudgedCounts: v1alpha1.JudgedCounts{Given4h: 96, Survived4h: 90}}}, 2,
			[]v1alpha1.RecalibrationRecord{{LogOddsMilli: 2464, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 9}}, {LogOddsMilli: 2464, JudgedCounts: v1alpha1.JudgedCounts{Given1h: 9}}}, 0, poolProfile(0.5), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pool := v1alpha1.GPUPool{TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.Group + "/" + v1alpha1.Version, Kind: "GPUPool"},
				ObjectMeta: metav1.ObjectMeta{Name: "inference"},
				Status: v1alpha1.GPUPoolStatus{SurvivalByLoad: tt.record, Recalibration: tt.recal, PoolProfile: tt.pool,
					History: []v1alpha1.PoolSample{{Time: metav1.NewTime(time.Now().Add(-time.Hour)), Serving: 4, Lent: 2}}}}
			content, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&pool)
			if err != nil {
				t.Fatal(err)
			}
			client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
				v1alpha1.GPUPoolResource: "GPUPoolList", v1alpha1.HarvestReportResource: "HarvestReportList"}, &unstructured.Unstructured{Object: content})
			cfg := StatusConfig{Client: client}
			cfg.defaults()
			p := &publisher{cfg: cfg, ledger: &ledger.Ledger{}}
			planner := round.New(round.Config{})
			// The HarvestReports cannot be listed the first time: the restore
			// is tried again, and the GPUPool's records are taken once.
			listed := false
			client.PrependReactor("list", "harvestreports", func(k8stesting.Action) (bool, runtime.Object, error) {
				if listed {
					return false, nil, nil
				}
				listed = true
				return true, nil, errors.New("the apiserver is away")
			})
			if err := p.restore(context.Background(), planner); err == nil {
				t.Fatal("a restore that could not list the HarvestReports said nothing")
			}
			if err := p.restore(context.Background(), planner); err != nil {
				t.Fatal(err)
			}
			var back v1alpha1.GPUPoolStatus
			storeMemory(planner.Memory(time.Now()), &back)
			if got := back.SurvivalByLoad; len(got) != tt.want {
				t.Fatalf("the planner holds %+v after the restore, want %d counts", got, tt.want)
			}
			if tt.want > 0 {
				if got := back.SurvivalByLoad; got[0] != tt.record[0] || got[1] != tt.record[1] {
					t.Errorf("restored %+v, published %+v", got, tt.record)
				}
			}
			if got := back.Recalibration; len(got) != tt.recals || tt.recals > 0 && !reflect.DeepEqual(got, tt.recal) {
				t.Errorf("the planner's recalibration is %+v after the restore of %+v", got, tt.recal)
			}
			if got := back.PoolProfile; (got == tt.pool) != tt.same {
				t.Errorf("the planner's pool profile is %.80s after the restore of %.80s", got, tt.pool)
			}
			if len(p.history.Samples()) != 1 {
				t.Error("the pool's history was not restored with it")
			}
		})
	}
}

// poolProfile is a stored pool profile with one slot learned, at ratio.
func poolProfile(ratio float64) string {
	var p demand.PoolProfile
	p.Ratio[7], p.Weeks[7] = ratio, 2
	raw, err := json.Marshal(p)
	if err != nil {
		panic(err)
	}
	return string(raw)
}
