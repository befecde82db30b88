//go:build !race

package simserver

const raceEnabled = false
