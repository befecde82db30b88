package podresources

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gpulens/gpulens/internal/testenv"
)

// fakeKubelet serves PodResourcesLister on a unix socket.
type fakeKubelet struct {
	podresourcesv1.UnimplementedPodResourcesListerServer

	mu    sync.Mutex
	pods  []*podresourcesv1.PodResources
	err   error
	block bool // List waits for the caller's deadline

	calls    atomic.Int64
	accepted atomic.Int64
	srv      *grpc.Server
	done     chan struct{}
}

func (k *fakeKubelet) List(ctx context.Context, _ *podresourcesv1.ListPodResourcesRequest) (*podresourcesv1.ListPodResourcesResponse, error) {
	k.calls.Add(1)
	k.mu.Lock()
	pods, err, block := k.pods, k.err, k.block
	k.mu.Unlock()
	if block {
		<-ctx.Done()
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	if err != nil {
		return nil, err
	}
	return &podresourcesv1.ListPodResourcesResponse{PodResources: pods}, nil
}

func (k *fakeKubelet) set(pods []*podresourcesv1.PodResources, err error, block bool) {
	k.mu.Lock()
	k.pods, k.err, k.block = pods, err, block
	k.mu.Unlock()
}

// countingListener counts the connections it accepts.
type countingListener struct {
	net.Listener
	n *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// socketDir is short: a unix socket path must fit in 108 bytes, and
// t.TempDir's names can be longer than that.
func socketDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// serve starts a fake kubelet on path; it is stopped when the test ends.
func serve(t *testing.T, path string, pods []*podresourcesv1.PodResources) *fakeKubelet {
	t.Helper()
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	k := &fakeKubelet{pods: pods, srv: grpc.NewServer(), done: make(chan struct{})}
	podresourcesv1.RegisterPodResourcesListerServer(k.srv, k)
	go func() {
		defer close(k.done)
		k.srv.Serve(countingListener{Listener: l, n: &k.accepted})
	}()
	t.Cleanup(k.stop)
	return k
}

func (k *fakeKubelet) stop() {
	k.srv.Stop()
	<-k.done
}

func dial(t *testing.T, path string, opts ...Option) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	// The timeout of each List only stops a broken test from hanging.
	c, err := Dial(ctx, path, 30*time.Second, nil, opts...)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func devices(resource string, ids ...string) *podresourcesv1.ContainerDevices {
	return &podresourcesv1.ContainerDevices{ResourceName: resource, DeviceIds: ids}
}

func ctr(name string, devs ...*podresourcesv1.ContainerDevices) *podresourcesv1.ContainerResources {
	return &podresourcesv1.ContainerResources{Name: name, Devices: devs, CpuIds: []int64{2, 3}}
}

func pod(ns, name string, ctrs ...*podresourcesv1.ContainerResources) *podresourcesv1.PodResources {
	return &podresourcesv1.PodResources{Namespace: ns, Name: name, Containers: ctrs}
}

const (
	gpuA = "GPU-4b5a8c3e-1f2d-4e6a-9b7c-0d1e2f3a4b5c"
	gpuB = "GPU-7c8d9e0f-a1b2-4c3d-8e4f-5a6b7c8d9e0f"
	gpuC = "GPU-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
	gpuD = "GPU-9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a"
	migX = "MIG-2d3e4f5a-6b7c-5d8e-9f0a-1b2c3d4e5f6a"
	migY = "MIG-8e9f0a1b-2c3d-5e4f-a5b6-c7d8e9f0a1b2"
)

// node is a GPU node: whole GPUs, time-sliced replicas shared by two pods,
// MIG devices, a shared-MIG replica, a renamed shared resource, containers
// and pods without GPUs, and another vendor's devices.
func node() []*podresourcesv1.PodResources {
	return []*podresourcesv1.PodResources{
		pod("ml", "trainer-0",
			ctr("main", devices("nvidia.com/gpu", gpuB, gpuA), devices("example.com/fpga", "fpga-0")),
			ctr("log-shipper"),
		),
		pod("ml", "infer-b", ctr("server", devices("nvidia.com/gpu", gpuC+"::3"))),
		pod("ml", "infer-a", ctr("server", devices("nvidia.com/gpu", gpuC+"::0"))),
		pod("team-b", "notebook", ctr("jupyter", devices("nvidia.com/mig-1g.10gb", migX))),
		pod("team-b", "batch",
			ctr("worker", devices("nvidia.com/mig-3g.40gb", migY+"::1"), devices("nvidia.com/gpu.shared", gpuD+"::1")),
			ctr("init-db", &podresourcesv1.ContainerDevices{ResourceName: "nvidia.com/gpu"}),
		),
		pod("kube-system", "coredns-5d78c9869d-x2x7k", ctr("coredns")),
		pod("default", "empty"),
	}
}

func TestLookup(t *testing.T) {
	path := filepath.Join(socketDir(t), "kubelet.sock")
	serve(t, path, node())
	c := dial(t, path)

	trainerA := Allocation{Namespace: "ml", Pod: "trainer-0", Container: "main", ResourceName: "nvidia.com/gpu", DeviceID: gpuA}
	trainerB := Allocation{Namespace: "ml", Pod: "trainer-0", Container: "main", ResourceName: "nvidia.com/gpu", DeviceID: gpuB}
	inferA := Allocation{Namespace: "ml", Pod: "infer-a", Container: "server", ResourceName: "nvidia.com/gpu", DeviceID: gpuC + "::0"}
	inferB := Allocation{Namespace: "ml", Pod: "infer-b", Container: "server", ResourceName: "nvidia.com/gpu", DeviceID: gpuC + "::3"}
	notebook := Allocation{Namespace: "team-b", Pod: "notebook", Container: "jupyter", ResourceName: "nvidia.com/mig-1g.10gb", DeviceID: migX}
	batchMIG := Allocation{Namespace: "team-b", Pod: "batch", Container: "worker", ResourceName: "nvidia.com/mig-3g.40gb", DeviceID: migY + "::1"}

	tests := []struct {
		name string
		ids  []string
		want []Allocation
	}{
		{"whole GPU", []string{gpuA}, []Allocation{trainerA}},
		{"time-sliced GPU: every replica", []string{gpuC}, []Allocation{inferA, inferB}},
		{"replica id: its GPU's replicas", []string{gpuC + "::3"}, []Allocation{inferA, inferB}},
		{"MIG device", []string{migX}, []Allocation{notebook}},
		{"shared MIG device", []string{migY}, []Allocation{batchMIG}},
		{"renamed shared resource is not matched by default", []string{gpuD}, nil},
		{"unallocated GPU", []string{"GPU-00000000-0000-0000-0000-000000000000"}, nil},
		{"another vendor's device", []string{"fpga-0"}, nil},
		{"no ids", nil, nil},
		{"several ids, duplicates once, sorted", []string{gpuC, gpuA, migX, gpuA, gpuC + "::0"}, []Allocation{inferA, inferB, trainerA, notebook}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.Lookup(tt.ids...); !slices.Equal(got, tt.want) {
				t.Errorf("Lookup(%q):\n got %+v\nwant %+v", tt.ids, got, tt.want)
			}
		})
	}

	wantAll := []Allocation{inferA, inferB, trainerA, trainerB, batchMIG, notebook}
	if got := c.All(); !slices.Equal(got, wantAll) {
		t.Errorf("All:\n got %+v\nwant %+v", got, wantAll)
	}

	// Results are copies: changing one does not change the index.
	got := c.Lookup(gpuA)
	got[0].Pod = "changed"
	all := c.All()
	all[0].Pod = "changed"
	if again := c.Lookup(gpuA); !slices.Equal(again, []Allocation{trainerA}) {
		t.Errorf("Lookup after mutating a result = %+v", again)
	}
	if again := c.All(); !slices.Equal(again, wantAll) {
		t.Errorf("All after mutating a result = %+v", again)
	}
}

func TestDeviceUUID(t *testing.T) {
	tests := []struct{ in, want string }{
		{gpuA, gpuA},
		{gpuC + "::0", gpuC},
		{gpuC + "::12", gpuC},
		{migY + "::1", migY},
		{"0", "0"},
		{"", ""},
		{"::1", ""},
	}
	for _, tt := range tests {
		if got := DeviceUUID(tt.in); got != tt.want {
			t.Errorf("DeviceUUID(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestWithResourceNames(t *testing.T) {
	path := filepath.Join(socketDir(t), "kubelet.sock")
	serve(t, path, node())

	tests := []struct {
		name  string
		names []string
		id    string
		want  []Allocation
	}{
		{"exact name", []string{"nvidia.com/gpu.shared"}, gpuD, []Allocation{
			{Namespace: "team-b", Pod: "batch", Container: "worker", ResourceName: "nvidia.com/gpu.shared", DeviceID: gpuD + "::1"},
		}},
		{"prefix", []string{"example.com/*"}, "fpga-0", []Allocation{
			{Namespace: "ml", Pod: "trainer-0", Container: "main", ResourceName: "example.com/fpga", DeviceID: "fpga-0"},
		}},
		{"defaults stay", []string{"example.com/*"}, gpuA, []Allocation{
			{Namespace: "ml", Pod: "trainer-0", Container: "main", ResourceName: "nvidia.com/gpu", DeviceID: gpuA},
		}},
		{"a prefix must match from the start", []string{"gpu.shared*"}, gpuD, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := dial(t, path, WithResourceNames(tt.names...))
			if got := c.Lookup(tt.id); !slices.Equal(got, tt.want) {
				t.Errorf("Lookup(%q):\n got %+v\nwant %+v", tt.id, got, tt.want)
			}
		})
	}
}

func TestRefreshFailureKeepsIndex(t *testing.T) {
	path := filepath.Join(socketDir(t), "kubelet.sock")
	k := serve(t, path, node())
	c := dial(t, path)
	before := c.All()
	if len(before) != 6 {
		t.Fatalf("All = %d allocations, want 6", len(before))
	}

	// The kubelet answers with an error.
	k.set(nil, status.Error(codes.Internal, "pod resources unavailable"), false)
	err := c.Refresh(context.Background())
	if status.Code(err) != codes.Internal || !strings.HasPrefix(err.Error(), "listing pod resources on "+path+": ") {
		t.Errorf("Refresh error %v, want a wrapped Internal status naming the socket", err)
	}
	if got := c.All(); !slices.Equal(got, before) {
		t.Errorf("All after a failed Refresh = %+v, want the previous index", got)
	}

	// The kubelet is gone.
	k.stop()
	err = c.Refresh(context.Background())
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Refresh with the kubelet stopped: error %v, want Unavailable", err)
	}
	if got := c.Lookup(gpuA); len(got) != 1 || got[0].Pod != "trainer-0" {
		t.Errorf("Lookup after a failed Refresh = %+v, want the previous index", got)
	}

	// The kubelet restarts on the same socket with different pods: the
	// same Client reconnects.
	os.Remove(path)
	k2 := serve(t, path, []*podresourcesv1.PodResources{pod("ml", "trainer-1", ctr("main", devices("nvidia.com/gpu", gpuA)))})
	wait, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	testenv.Eventually(wait, t, 20*time.Millisecond, "a successful Refresh after the kubelet's restart", func() (bool, string) {
		err := c.Refresh(context.Background())
		return err == nil, fmt.Sprint(err)
	})
	want := []Allocation{{Namespace: "ml", Pod: "trainer-1", Container: "main", ResourceName: "nvidia.com/gpu", DeviceID: gpuA}}
	if got := c.All(); !slices.Equal(got, want) {
		t.Errorf("All after reconnecting = %+v, want %+v", got, want)
	}
	if n := k2.accepted.Load(); n != 1 {
		t.Errorf("restarted kubelet accepted %d connections, want 1", n)
	}
}

func TestRefreshDeadline(t *testing.T) {
	path := filepath.Join(socketDir(t), "kubelet.sock")
	k := serve(t, path, node())
	ctx := context.Background()
	c, err := Dial(ctx, path, 100*time.Millisecond, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Dial's first List may miss its 100 ms on a busy machine (Dial then
	// only logs); the index must hold the node's allocations before the
	// kubelet hangs. The deadline only stops a broken test from hanging.
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	testenv.Eventually(wait, t, 10*time.Millisecond, "a Refresh that indexes the node's 6 allocations", func() (bool, string) {
		if n := len(c.All()); n == 6 {
			return true, ""
		}
		err := c.Refresh(ctx)
		return len(c.All()) == 6, fmt.Sprintf("%d indexed (last Refresh: %v)", len(c.All()), err)
	})
	k.set(nil, nil, true)

	// Only the Dial timeout can end a List against a hung kubelet.
	start := time.Now()
	err = c.Refresh(ctx)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("Refresh against a hung kubelet: error %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > time.Minute {
		t.Errorf("Refresh took %s with a 100ms timeout", took)
	}
	// A caller's earlier deadline wins over the Dial timeout.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Refresh(cctx); status.Code(err) != codes.Canceled {
		t.Errorf("Refresh with a cancelled context: error %v, want Canceled", err)
	}
	if got := len(c.All()); got != 6 {
		t.Errorf("All after timeouts = %d allocations, want the previous 6", got)
	}
}

func TestOneConnection(t *testing.T) {
	path := filepath.Join(socketDir(t), "kubelet.sock")
	k := serve(t, path, node())
	c := dial(t, path)
	ctx := context.Background()
	for i := range 50 {
		if err := c.Refresh(ctx); err != nil {
			t.Fatalf("Refresh %d: %v", i, err)
		}
	}
	if n := k.accepted.Load(); n != 1 {
		t.Errorf("kubelet accepted %d connections over 51 List calls, want 1", n)
	}
	if n := k.calls.Load(); n != 51 {
		t.Errorf("kubelet served %d List calls, want 51 (Dial's first and 50 Refresh)", n)
	}
	// Lookups never reach the kubelet.
	for range 100 {
		c.Lookup(gpuA, migX)
		c.All()
	}
	if n := k.calls.Load(); n != 51 {
		t.Errorf("kubelet served %d List calls after lookups, want still 51", n)
	}
}

func TestDial(t *testing.T) {
	dir := socketDir(t)
	ctx := context.Background()

	_, err := Dial(ctx, filepath.Join(dir, "missing.sock"), time.Second, nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Dial(missing socket) error %v, want one wrapping fs.ErrNotExist", err)
	}

	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Dial(ctx, file, time.Second, nil)
	if want := "pod-resources socket " + file + " is not a unix socket (mode -rw-------)"; err == nil || err.Error() != want {
		t.Errorf("Dial(regular file) error %v, want %q", err, want)
	}

	_, err = Dial(ctx, file, 0, nil)
	if want := "pod-resources timeout must be positive, got 0s"; err == nil || err.Error() != want {
		t.Errorf("Dial(timeout 0) error %v, want %q", err, want)
	}

	// A kubelet that fails the first List: Dial still succeeds with an
	// empty index, and the next Refresh fills it.
	path := filepath.Join(dir, "kubelet.sock")
	k := serve(t, path, nil)
	k.set(nil, status.Error(codes.Unavailable, "starting"), false)
	c := dial(t, path)
	if got := c.All(); len(got) != 0 {
		t.Errorf("All after a failed first refresh = %+v, want none", got)
	}
	k.set(node(), nil, false)
	if err := c.Refresh(ctx); err != nil {
		t.Fatalf("Refresh: %v", err)
	}
	if got := len(c.All()); got != 6 {
		t.Errorf("All after Refresh = %d allocations, want 6", got)
	}
}

// TestLargeNode checks that an answer above gRPC's default 4 MiB receive
// limit still arrives.
func TestLargeNode(t *testing.T) {
	const n = 30000
	pods := make([]*podresourcesv1.PodResources, 0, n)
	for i := range n {
		pods = append(pods, pod("namespace-with-a-long-name", fmt.Sprintf("statefulset-with-a-rather-long-name-%06d", i),
			ctr("container-with-a-long-name", devices("nvidia.com/gpu", fmt.Sprintf("GPU-%08d-0000-4000-8000-000000000000::%d", i%8, i)))))
	}
	if size := proto.Size(&podresourcesv1.ListPodResourcesResponse{PodResources: pods}); size <= 4<<20 {
		t.Fatalf("response is %d bytes, want above 4 MiB", size)
	}
	path := filepath.Join(socketDir(t), "kubelet.sock")
	serve(t, path, pods)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// 30,000 pods take a while to encode under -race on a loaded machine:
	// give this List a generous deadline of its own instead of Dial's.
	c, err := Dial(ctx, path, 60*time.Second, nil)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if got := len(c.All()); got != n {
		t.Fatalf("All = %d allocations, want %d", got, n)
	}
	if got := len(c.Lookup("GPU-00000003-0000-4000-8000-000000000000")); got != n/8 {
		t.Errorf("Lookup = %d allocations, want %d", got, n/8)
	}
}

// TestConcurrentLookup swaps between two indexes while readers look up:
// every read sees one whole index, never a mix.
func TestConcurrentLookup(t *testing.T) {
	path := filepath.Join(socketDir(t), "kubelet.sock")
	one := []*podresourcesv1.PodResources{pod("ml", "a", ctr("main", devices("nvidia.com/gpu", gpuA, gpuB)))}
	two := []*podresourcesv1.PodResources{pod("ml", "b", ctr("main", devices("nvidia.com/gpu", gpuA, gpuB)))}
	k := serve(t, path, one)
	c := dial(t, path)

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var reads atomic.Int64
	for range 2 {
		wg.Go(func() {
			for ctx.Err() == nil {
				got := c.Lookup(gpuA, gpuB)
				if len(got) != 2 || got[0].Pod != got[1].Pod || (got[0].Pod != "a" && got[0].Pod != "b") {
					t.Errorf("Lookup saw a torn index: %+v", got)
					return
				}
				reads.Add(1)
				runtime.Gosched()
			}
		})
	}
	for i := range 40 {
		if i%2 == 0 {
			k.set(two, nil, false)
		} else {
			k.set(one, nil, false)
		}
		if err := c.Refresh(ctx); err != nil {
			t.Errorf("Refresh %d: %v", i, err)
		}
	}
	cancel()
	wg.Wait()
	if reads.Load() == 0 {
		t.Error("readers made no lookups")
	}
	if got := c.Lookup(gpuA); len(got) != 1 || got[0].Pod != "a" {
		t.Errorf("final Lookup = %+v, want pod a", got)
	}
}

// BenchmarkLookup looks up one GPU of an 8-GPU node where every GPU is
// time-sliced into 8 replicas held by 8 pods.
func BenchmarkLookup(b *testing.B) {
	gpus := []string{gpuA, gpuB, gpuC, gpuD, "GPU-1", "GPU-2", "GPU-3", "GPU-4"}
	var pods []*podresourcesv1.PodResources
	for _, g := range gpus {
		for r := range 8 {
			id := fmt.Sprintf("%s::%d", g, r)
			pods = append(pods, pod("ml", "pod-"+id, ctr("main", devices("nvidia.com/gpu", id))))
		}
	}
	c := &Client{}
	c.idx.Store(buildIndex(pods, func(string) bool { return true }))
	b.ReportAllocs()
	for b.Loop() {
		if got := c.Lookup(gpuC); len(got) != 8 {
			b.Fatalf("Lookup = %d allocations, want 8", len(got))
		}
	}
}
