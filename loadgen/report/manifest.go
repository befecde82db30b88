package report

// Manifest is what makes a report reproducible and two reports comparable
// (Metadata.Manifest).
type Manifest struct {
	// Server holds what the server said about itself, one entry per
	// endpoint asked (answered or not).
	Server []ServerFact `json:"server,omitempty"`
	// ServerVersion and ModelRevision are the server's version and the
	// model revision (commit, sha, digest) when an endpoint told them.
	ServerVersion string `json:"server_version,omitempty"`
	ModelRevision string `json:"model_revision,omitempty"`
	// Host is the load generator's host.
	Host HostFacts `json:"host"`
	// Labels are the user's key=value labels (container image digest,
	// framework version, evaluation code commit…).
	Labels map[string]string `json:"labels,omitempty"`
	// SettingsHash is the hex SHA-256 of the canonical JSON of everything
	// that shapes the workload and its measurement (the run settings, the
	// dataset hash, the model, the endpoint kind; not the run ID, times,
	// nonce or target host): equal hashes mean "same configuration".
	SettingsHash string `json:"settings_hash"`
}

// ServerFact is one endpoint's answer, e.g. vLLM's GET /version.
type ServerFact struct {
	// Endpoint is the method and path asked, e.g. "GET /version".
	Endpoint string `json:"endpoint"`
	// Status is the HTTP status (0 when the request failed).
	Status int `json:"status"`
	// Fields are the answer's scalar fields worth keeping (strings and
	// numbers as text), e.g. {"version": "0.11.0"}.
	Fields map[string]string `json:"fields,omitempty"`
	Error  string            `json:"error,omitempty"`
}

// HostFacts describe the machine the load generator ran on.
type HostFacts struct {
	OS       string `json:"os"`
	Arch     string `json:"arch"`
	Kernel   string `json:"kernel,omitempty"`
	CPUs     int    `json:"cpus"`
	CPUModel string `json:"cpu_model,omitempty"`
	Hostname string `json:"hostname,omitempty"`
}
