// Package podresources tells which Kubernetes pod and container hold which
// GPU, from the kubelet's pod-resources API (the v1 PodResourcesLister gRPC
// service on the kubelet's unix socket).
//
// A Client keeps one long-lived gRPC connection. Refresh lists the node's
// pods and swaps in a new immutable index; Lookup and All read the latest
// index without locks and never call the kubelet, so they are safe on a
// scrape path.
package podresources

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the pod-resources API.
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxMessageSize is what one List answer may take; the kubelet's own client
// uses the same bound, a node with hundreds of pods stays well below it.
const maxMessageSize = 16 << 20

// Allocation is one device that the kubelet assigned to one container.
type Allocation struct {
	Namespace, Pod, Container string
	// ResourceName is the extended resource, e.g. "nvidia.com/gpu" or
	// "nvidia.com/mig-1g.10gb".
	ResourceName string
	// DeviceID is the device plugin's id as the kubelet reports it: a GPU
	// UUID ("GPU-…"), a MIG device UUID ("MIG-…"), or a shared replica of
	// either ("GPU-…::3") under time-slicing or MPS.
	DeviceID string
}

// Option configures a Client.
type Option func(*options)

type options struct {
	resources []string
}

// WithResourceNames adds resource names to match besides "nvidia.com/gpu"
// and "nvidia.com/mig-*", e.g. "nvidia.com/gpu.shared" for a device plugin
// that renames time-sliced replicas. A name ending in "*" matches every
// name with that prefix.
func WithResourceNames(names ...string) Option {
	return func(o *options) { o.resources = append(o.resources, names...) }
}

// defaultResources are the NVIDIA device plugin's resource names.
var defaultResources = []string{"nvidia.com/gpu", "nvidia.com/mig-*"}

// Client reads GPU allocations from the kubelet.
type Client struct {
	socket    string
	timeout   time.Duration
	logger    *slog.Logger
	resources []string
	conn      *grpc.ClientConn
	lister    podresourcesv1.PodResourcesListerClient
	idx       atomic.Pointer[index]
}

// Dial opens one long-lived connection to the pod-resources socket and
// makes a first Refresh under ctx. timeout bounds every List call.
//
// A missing socket is an error that wraps fs.ErrNotExist (the node does not
// run a kubelet, or the socket is not mounted): callers switch the feature
// off. A first Refresh that fails (a kubelet restarting) is only logged: the
// Client is returned and later Refresh calls reconnect.
func Dial(ctx context.Context, socketPath string, timeout time.Duration, logger *slog.Logger, opts ...Option) (*Client, error) {
	if timeout <= 0 {
		return nil, fmt.Errorf("pod-resources timeout must be positive, got %s", timeout)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	abs, err := filepath.Abs(socketPath)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", socketPath, err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket: %w", err)
	}
	if fi.Mode().Type() != os.ModeSocket {
		return nil, fmt.Errorf("pod-resources socket %s is not a unix socket (mode %s)", abs, fi.Mode())
	}
	o := options{resources: slices.Clone(defaultResources)}
	for _, opt := range opts {
		opt(&o)
	}
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)),
		// A restarted kubelet comes back within seconds: do not let
		// the reconnect backoff grow to gRPC's default two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 5 * time.Second},
			MinConnectTimeout: timeout,
		}),
	)
	if err != nil {
		return nil, fmt.Errorf("pod-resources socket %s: %w", abs, err)
	}
	c := &Client{
		socket:    abs,
		timeout:   timeout,
		logger:    logger,
		resources: o.resources,
		conn:      conn,
		lister:    podresourcesv1.NewPodResourcesListerClient(conn),
	}
	c.idx.Store(&index{})
	if err := c.Refresh(ctx); err != nil {
		logger.Warn("First pod-resources refresh failed; will retry", "socket", abs, "err", err)
	}
	return c, nil
}

// Refresh lists the kubelet's pod resources (bounded by ctx and the Dial
// timeout) and replaces the index in one atomic step. On error the previous
// index stays in place and the error is returned.
func (c *Client) Refresh(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.lister.List(ctx, &podresourcesv1.ListPodResourcesRequest{})
	if err != nil {
		return fmt.Errorf("listing pod resources on %s: %w", c.socket, err)
	}
	idx := buildIndex(resp.GetPodResources(), c.matches)
	c.idx.Store(idx)
	c.logger.Debug("Refreshed pod resources", "pods", len(resp.GetPodResources()), "gpu_allocations", len(idx.all))
	return nil
}

// Lookup returns every allocation of the given device ids, from the latest
// index. An id is a GPU UUID, a MIG device UUID or a replica id; a replica
// suffix ("::N") is ignored on both sides, so Lookup("GPU-x") returns the
// whole GPU's allocation and every time-sliced replica of it. Each
// allocation is returned once, in All's order. Lookup never calls gRPC.
func (c *Client) Lookup(ids ...string) []Allocation {
	idx := c.idx.Load()
	switch len(ids) {
	case 0:
		return nil
	case 1:
		return slices.Clone(idx.byDevice[DeviceUUID(ids[0])])
	}
	var out []Allocation
	seen := make(map[string]bool, len(ids))
	for _, id := range ids {
		k := DeviceUUID(id)
		if seen[k] {
			continue
		}
		seen[k] = true
		out = append(out, idx.byDevice[k]...)
	}
	slices.SortFunc(out, compareAllocations)
	return out
}

// All returns every GPU allocation of the latest index, sorted by
// namespace, pod, container, resource name and device id.
func (c *Client) All() []Allocation {
	return slices.Clone(c.idx.Load().all)
}

// Close closes the connection.
func (c *Client) Close() error {
	if err := c.conn.Close(); err != nil {
		return fmt.Errorf("closing pod-resources connection: %w", err)
	}
	return nil
}

func (c *Client) matches(resource string) bool {
	for _, r := range c.resources {
		if prefix, ok := strings.CutSuffix(r, "*"); ok {
			if strings.HasPrefix(resource, prefix) {
				return true
			}
		} else if resource == r {
			return true
		}
	}
	return false
}

// index is immutable once stored.
type index struct {
	all      []Allocation
	byDevice map[string][]Allocation
}

func buildIndex(pods []*podresourcesv1.PodResources, match func(string) bool) *index {
	idx := &index{byDevice: make(map[string][]Allocation)}
	for _, p := range pods {
		for _, ctr := range p.GetContainers() {
			for _, dev := range ctr.GetDevices() {
				if !match(dev.GetResourceName()) {
					continue
				}
				for _, id := range dev.GetDeviceIds() {
					idx.all = append(idx.all, Allocation{
						Namespace:    p.GetNamespace(),
						Pod:          p.GetName(),
						Container:    ctr.GetName(),
						ResourceName: dev.GetResourceName(),
						DeviceID:     id,
					})
				}
			}
		}
	}
	slices.SortFunc(idx.all, compareAllocations)
	idx.all = slices.Compact(idx.all)
	for _, a := range idx.all {
		k := DeviceUUID(a.DeviceID)
		idx.byDevice[k] = append(idx.byDevice[k], a)
	}
	return idx
}

// DeviceUUID returns the GPU or MIG device UUID that a device-plugin id
// names: "GPU-x::3" (a time-sliced or MPS replica) gives "GPU-x"; any other
// id is returned as it is. Use it to compare an Allocation's DeviceID with
// an NVML UUID.
func DeviceUUID(deviceID string) string {
	if base, _, ok := strings.Cut(deviceID, "::"); ok {
		return base
	}
	return deviceID
}

func compareAllocations(a, b Allocation) int {
	return cmp.Or(
		strings.Compare(a.Namespace, b.Namespace),
		strings.Compare(a.Pod, b.Pod),
		strings.Compare(a.Container, b.Container),
		strings.Compare(a.ResourceName, b.ResourceName),
		strings.Compare(a.DeviceID, b.DeviceID),
	)
}
