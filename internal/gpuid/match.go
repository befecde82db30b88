package gpuid

import "strings"

// GPU is what NVML says of one GPU that a CUDA device can be matched on.
type GPU struct {
	UUID     string   // "GPU-…"
	BusID    string   // any form ParseBusID reads
	MIGUUIDs []string // its MIG instances' "MIG-…" UUIDs, when read
}

// How a CUDA device was matched to an NVML GPU; the values are verify's
// report field "matched_by".
const (
	ByUUID    = "uuid"
	ByMIGUUID = "mig_uuid"
	ByBusID   = "pci_bus_id"
)

// Match is a CUDA device's NVML GPU.
type Match struct {
	GPU int    // index in the list matched against
	MIG int    // index in that GPU's MIGUUIDs; -1 when not matched on one
	By  string // ByUUID, ByMIGUUID or ByBusID
}

// MatchCUDA finds the NVML GPU of a CUDA device from the device's UUID and
// PCI bus id (cuDeviceGetUuid, and the bus id attributes): first a GPU whose
// UUID is the device's, then a GPU with a MIG instance of that UUID (a MIG
// instance's CUDA UUID is the instance's), then the GPU on the same PCI bus
// id. UUIDs compare case-insensitively. ok is false when none matches.
func MatchCUDA(uuid, busID string, gpus []GPU) (m Match, ok bool) {
	if uuid != "" {
		for i, g := range gpus {
			if strings.EqualFold(g.UUID, uuid) {
				return Match{GPU: i, MIG: -1, By: ByUUID}, true
			}
		}
		for i, g := range gpus {
			for j, mu := range g.MIGUUIDs {
				if strings.EqualFold(mu, uuid) {
					return Match{GPU: i, MIG: j, By: ByMIGUUID}, true
				}
			}
		}
	}
	if want, err := ParseBusID(busID); err == nil {
		for i, g := range gpus {
			if b, err := ParseBusID(g.BusID); err == nil && b == want {
				return Match{GPU: i, MIG: -1, By: ByBusID}, true
			}
		}
	}
	return Match{GPU: -1, MIG: -1}, false
}
