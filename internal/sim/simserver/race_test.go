//go:build race

package simserver

const raceEnabled = true
