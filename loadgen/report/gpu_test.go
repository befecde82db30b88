package report

import "testing"

func TestSetWork(t *testing.T) {
	for _, tc := range []struct {
		energy               float64
		tokens               int64
		completed            int
		perJoule, perRequest float64
	}{
		{2100, 4200, 21, 2, 100},
		{0, 4200, 21, 0, 0},
		{50, 0, 0, 0, 0},
	} {
		g := RunGPU{EnergyJoules: tc.energy, OutputTokensPerJoule: 9, EnergyPerRequestJoules: 9}
		g.SetWork(tc.tokens, tc.completed)
		if g.OutputTokensPerJoule != tc.perJoule || g.EnergyPerRequestJoules != tc.perRequest {
			t.Errorf("%+v: %v tokens/J, %v J/request; want %v, %v", tc, g.OutputTokensPerJoule, g.EnergyPerRequestJoules, tc.perJoule, tc.perRequest)
		}
	}
}
