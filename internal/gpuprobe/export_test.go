package gpuprobe

// SetThreadHooks replaces runtime.LockOSThread and runtime.UnlockOSThread
// for p's driver goroutine (tests count them).
func SetThreadHooks(p *Probe, lock, unlock func()) { p.lockThread, p.unlockThread = lock, unlock }

// PTXBase and PTXTensor are the modules' PTX text (the emulation tests
// run it).
var PTXBase, PTXTensor = ptxBase, ptxTensor
