package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alecthomas/kingpin/v2"

	"github.com/gpulens/gpulens/collector"
	"github.com/gpulens/gpulens/internal/cgroup"
	"github.com/gpulens/gpulens/internal/cliflag"
	"github.com/gpulens/gpulens/internal/podresources"
)

// attributionFlags configure the process collector's procfs reads and its
// container and pod attribution.
type attributionFlags struct {
	procfs           string
	maxPerGPU        int
	podResources     string
	containerLogs    string
	podResourcesWait time.Duration
}

func addAttributionFlags(app *kingpin.Application, f *attributionFlags) {
	app.Flag("path.procfs", "procfs mount point: process names, command lines, users, cgroups, the GPU processes' CPU, memory and I/O, and the host's pressure (PSI) and CPU count (mount the host's /proc and run with hostPID in a container).").Default("/proc").StringVar(&f.procfs)
	app.Flag("collector.process.max-per-gpu", "Keep the N processes with the most GPU memory per GPU; fold the others into one pid=\"other\" series.").Default(fmt.Sprint(collector.DefaultMaxProcessesPerGPU)).IntVar(&f.maxPerGPU)
	app.Flag("kubernetes.pod-resources-socket", "kubelet pod-resources socket: namespace, pod and container of each GPU and MIG device. An absent socket switches the feature off.").Default(podresources.DefaultSocket).StringVar(&f.podResources)
	app.Flag("kubernetes.container-logs", "kubelet's container log symlinks (<pod>_<namespace>_<container>-<id>.log): name the pod of a process from its cgroup container id when several pods share a GPU. Absent: off.").Default("/var/log/containers").StringVar(&f.containerLogs)
	cliflag.Duration(app, "kubernetes.pod-resources-timeout", "Deadline of one pod-resources List call.", "5s", &f.podResourcesWait)
}

func (f *attributionFlags) validate() error {
	if f.maxPerGPU < 1 {
		return fmt.Errorf("--collector.process.max-per-gpu must be at least 1, got %d", f.maxPerGPU)
	}
	if f.procfs == "" {
		return errors.New("--path.procfs must not be empty")
	}
	if f.podResourcesWait <= 0 {
		return fmt.Errorf("--kubernetes.pod-resources-timeout must be positive, got %s", f.podResourcesWait)
	}
	return nil
}

// setupAttribution builds the process options: procfs and cgroup
// attribution, and the pod-resources client refreshed every interval in the
// background (realSources; simSources has the simulated tenants stand in).
// stop ends the refresh and closes the connection.
func setupAttribution(ctx context.Context, f attributionFlags, interval time.Duration, logger *slog.Logger) (opts collector.ProcessOptions, stop func()) {
	opts = collector.ProcessOptions{ProcRoot: f.procfs, MaxPerGPU: f.maxPerGPU}
	stop = func() {}
	opts.Attributor = &cgroupAttributor{procRoot: f.procfs, logs: f.containerLogs, logger: logger}
	client, err := podresources.Dial(ctx, f.podResources, f.podResourcesWait, logger)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			logger.Info("kubelet pod-resources socket not found: pod attribution off", "socket", f.podResources)
		} else {
			logger.Warn("kubelet pod-resources unavailable: pod attribution off", "socket", f.podResources, "err", err)
		}
		return opts, stop
	}
	opts.Allocations = podAllocations{client}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-rctx.Done():
				return
			case <-t.C:
				if err := client.Refresh(rctx); err != nil && rctx.Err() == nil {
					logger.Warn("refreshing pod resources", "err", err)
				}
			}
		}
	}()
	return opts, func() {
		cancel()
		wg.Wait()
		if err := client.Close(); err != nil {
			logger.Warn("closing pod-resources client", "err", err)
		}
	}
}

// podAllocations adapts the pod-resources client to the collector.
type podAllocations struct{ c *podresources.Client }

func (p podAllocations) Lookup(ids ...string) []collector.Allocation {
	as := p.c.Lookup(ids...)
	out := make([]collector.Allocation, len(as))
	for i, a := range as {
		out[i] = collector.Allocation{Namespace: a.Namespace, Pod: a.Pod, Container: a.Container, DeviceID: podresources.DeviceUUID(a.DeviceID)}
	}
	return out
}

// cgroupAttributor reads a process's container from its cgroup, and names
// its pod from the kubelet's container log symlinks when they are mounted.
type cgroupAttributor struct {
	procRoot string
	logs     string
	logger   *slog.Logger
}

func (a *cgroupAttributor) Attribute(pid uint32) collector.Attribution {
	info, err := cgroup.ReadPID(a.procRoot, int(pid))
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			a.logger.Debug("reading process cgroup", "pid", pid, "err", err)
		}
		return collector.Attribution{}
	}
	out := collector.Attribution{ContainerID: info.ContainerID, Runtime: info.Runtime, PodUID: info.PodUID, JobID: info.SlurmJobID}
	if info.ContainerID != "" && info.PodUID != "" && a.logs != "" {
		out.Namespace, out.Pod, out.Container = podFromContainerLogs(a.logs, info.ContainerID)
	}
	return out
}

// podFromContainerLogs finds <pod>_<namespace>_<container>-<id>.log in dir.
// Pod, namespace and container names cannot contain '_', so the name splits
// unambiguously.
func podFromContainerLogs(dir, containerID string) (ns, pod, container string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", "", ""
	}
	suffix := "-" + containerID + ".log"
	for _, e := range entries {
		rest, ok := strings.CutSuffix(e.Name(), suffix)
		if !ok {
			continue
		}
		parts := strings.Split(rest, "_")
		if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
			continue
		}
		return parts[1], parts[0], parts[2]
	}
	return "", "", ""
}
