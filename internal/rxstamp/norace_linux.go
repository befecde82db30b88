//go:build !race

package rxstamp

func raceAcquire(uintptr) {}
