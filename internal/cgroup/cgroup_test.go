package cgroup

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"testing/iotest"
)

func TestParseFixtures(t *testing.T) {
	tests := []struct {
		file string
		want Info
	}{
		{"host-v2", Info{Path: "/"}},
		{"host-v1", Info{Path: "/"}},
		{"systemd-v2-init", Info{Runtime: "systemd", Unit: "init.scope", Path: "/init.scope"}},
		{"docker-v1-cgroupfs", Info{
			Runtime: "docker", ContainerID: "3f8bb35d221a474cfe218288a86b583999812688ef65f236d2b95a82fc9bd85e",
			Path: "/docker/3f8bb35d221a474cfe218288a86b583999812688ef65f236d2b95a82fc9bd85e",
		}},
		{"docker-v1-cgroupfs-shim", Info{
			// The unified line only names containerd.service: the v1
			// lines that name the container win.
			Runtime: "docker", ContainerID: "f2dc57fe619c86b4a382cfc2208705ad3858d0e466316dabf08787084fe89568",
			Path: "/docker/f2dc57fe619c86b4a382cfc2208705ad3858d0e466316dabf08787084fe89568",
		}},
		{"docker-v1-systemd", Info{
			Runtime: "docker", ContainerID: "dce92b3c89e9c90aa79eb8b27eb6af6adb301c82cf227fc81d71e24dbba639f6",
			Path: "/system.slice/docker-dce92b3c89e9c90aa79eb8b27eb6af6adb301c82cf227fc81d71e24dbba639f6.scope",
		}},
		{"docker-v2-cgroupfs", Info{
			Runtime: "docker", ContainerID: "e54d03c87cebd01fe04a47ee528f06d2a1a2dff6db2fefe4239c5be2209b4a01",
			Path: "/docker/e54d03c87cebd01fe04a47ee528f06d2a1a2dff6db2fefe4239c5be2209b4a01",
		}},
		{"docker-v2-systemd", Info{
			Runtime: "docker", ContainerID: "3bb3ca87e1be7e2475061a482c8b3982b7bd290473c7fc84469f4b6b90d52a54",
			Path: "/system.slice/docker-3bb3ca87e1be7e2475061a482c8b3982b7bd290473c7fc84469f4b6b90d52a54.scope",
		}},
		{"docker-v1-dind", Info{
			Runtime: "docker", ContainerID: "42577be41ce34a24eb7a1a82ebacede95c2d8d18c8afe6567c9cc653fb4337fc",
			Path: "/docker/110db5bc1427d0255296d155998502ac3a5433acdc93105ce5e3c0fb53f0080f/docker/42577be41ce34a24eb7a1a82ebacede95c2d8d18c8afe6567c9cc653fb4337fc",
		}},
		{"docker-v1-kubernetes-systemd", Info{
			Runtime: "docker", ContainerID: "05d44daf3f104f7425842f07e2989dd55248c9e79939078b14d043ad01bc4c36",
			PodUID: "5fc63562-f9d3-48a9-acba-d4251087b898",
			Path:   "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod5fc63562_f9d3_48a9_acba_d4251087b898.slice/docker-05d44daf3f104f7425842f07e2989dd55248c9e79939078b14d043ad01bc4c36.scope",
		}},
		{"containerd-v1-cgroupfs", Info{
			Runtime: "containerd", ContainerID: "bd23c88070d2911c3537a93b30d7fd2ee1f9be4bb60bcad87b0862f24cb22f2f",
			PodUID: "962a6952-437b-48eb-9cf1-92154f741795",
			Path:   "/kubepods/burstable/pod962a6952-437b-48eb-9cf1-92154f741795/bd23c88070d2911c3537a93b30d7fd2ee1f9be4bb60bcad87b0862f24cb22f2f",
		}},
		{"containerd-v1-systemd", Info{
			Runtime: "containerd", ContainerID: "0941adf29a4c28bf9ed77e2e304828aa111d3afb21ec7df91c91d6c575c861f8",
			PodUID: "142aa171-842a-4674-ba1c-06bbac9a60dc",
			Path:   "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod142aa171_842a_4674_ba1c_06bbac9a60dc.slice/cri-containerd-0941adf29a4c28bf9ed77e2e304828aa111d3afb21ec7df91c91d6c575c861f8.scope",
		}},
		{"containerd-v1-colon", Info{
			// Both forms name the container; the deeper
			// (containerd.service) one is the most specific.
			Runtime: "containerd", ContainerID: "8105a754aaac4a188f561d07d4438ffd93be198c6b3332f5b49502cde85f6164",
			PodUID: "6f177203-e227-433b-9ab5-127e0fb9f71b",
			Path:   "/system.slice/containerd.service/kubepods-besteffort-pod6f177203_e227_433b_9ab5_127e0fb9f71b.slice:cri-containerd:8105a754aaac4a188f561d07d4438ffd93be198c6b3332f5b49502cde85f6164",
		}},
		{"containerd-v2-systemd", Info{
			Runtime: "containerd", ContainerID: "7fbc8dc0c466fcfc5857c88815f401acbefb9ee14ac81e89260e87d76e13eb6c",
			PodUID: "9dccb599-1e53-4258-b0d1-d7bbbdadf37d",
			Path:   "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod9dccb599_1e53_4258_b0d1_d7bbbdadf37d.slice/cri-containerd-7fbc8dc0c466fcfc5857c88815f401acbefb9ee14ac81e89260e87d76e13eb6c.scope",
		}},
		{"containerd-v2-systemd-guaranteed", Info{
			Runtime: "containerd", ContainerID: "1f2ad90e3c3bdb2d1b36d1398fc1f53147d94d26a7b99b08b283ad1fbf13cd27",
			PodUID: "be6b6c3a-6c65-46c1-95de-f77267a9e489",
			Path:   "/kubepods.slice/kubepods-podbe6b6c3a_6c65_46c1_95de_f77267a9e489.slice/cri-containerd-1f2ad90e3c3bdb2d1b36d1398fc1f53147d94d26a7b99b08b283ad1fbf13cd27.scope",
		}},
		{"containerd-v2-cgroupfs-guaranteed", Info{
			Runtime: "containerd", ContainerID: "59ebfc020659e7b4f2ce503c3a647fe5021d72a30c91b210822e62bd5730e6da",
			PodUID: "65270201-89d8-4316-bd06-f970e70efbe9",
			Path:   "/kubepods/pod65270201-89d8-4316-bd06-f970e70efbe9/59ebfc020659e7b4f2ce503c3a647fe5021d72a30c91b210822e62bd5730e6da",
		}},
		{"containerd-v2-static-pod", Info{
			Runtime: "containerd", ContainerID: "2208f396d12ec3af96ea8215d8c43e329dfc12344e64f48d49d450b750781d8c",
			PodUID: "6b1f3c0d9e8a47b2a0c4d5e6f7a8b9c0",
			Path:   "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod6b1f3c0d9e8a47b2a0c4d5e6f7a8b9c0.slice/cri-containerd-2208f396d12ec3af96ea8215d8c43e329dfc12344e64f48d49d450b750781d8c.scope",
		}},
		{"containerd-v2-kind", Info{
			// A pod on a kind node: the node is a Docker container,
			// the process is in the pod's containerd container.
			Runtime: "containerd", ContainerID: "64b7eeddeac4b54b4b104b24c8804819b10db7eb13a9be58539ed0000c997838",
			PodUID: "3948f5ac-4a8a-492f-838a-15fa1c7e5e3c",
			Path:   "/system.slice/docker-be788ffa9847c07368f9b1f00fdf14dc6baa8d6d91677053bbcf97f41d739430.scope/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-besteffort.slice/kubelet-kubepods-besteffort-pod3948f5ac_4a8a_492f_838a_15fa1c7e5e3c.slice/cri-containerd-64b7eeddeac4b54b4b104b24c8804819b10db7eb13a9be58539ed0000c997838.scope",
		}},
		{"containerd-v2-deleted", Info{
			Runtime: "containerd", ContainerID: "513bd29950e46e229e48eac5669a5487d60332c12161ed65a3101c4417f234c1",
			PodUID: "5fc63562-f9d3-48a9-acba-d4251087b898",
			Path:   "/kubepods/besteffort/pod5fc63562-f9d3-48a9-acba-d4251087b898/513bd29950e46e229e48eac5669a5487d60332c12161ed65a3101c4417f234c1",
		}},
		{"containerd-v2-nerdctl", Info{
			Runtime: "containerd", ContainerID: "b7538a44832d1772d54a2fa865cf3f62b59dc5d3ab8d48c49fa97a2847d3395a",
			Path: "/system.slice/nerdctl-b7538a44832d1772d54a2fa865cf3f62b59dc5d3ab8d48c49fa97a2847d3395a.scope",
		}},
		{"crio-v2-systemd", Info{
			Runtime: "cri-o", ContainerID: "9521a59b0ccbce3651b96c54ae26f61cd453c5599148e02467476316c73ddcc6",
			PodUID: "962a6952-437b-48eb-9cf1-92154f741795",
			Path:   "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod962a6952_437b_48eb_9cf1_92154f741795.slice/crio-9521a59b0ccbce3651b96c54ae26f61cd453c5599148e02467476316c73ddcc6.scope",
		}},
		{"crio-v2-conmon", Info{
			// conmon monitors the container but is not it.
			Runtime: "cri-o", PodUID: "962a6952-437b-48eb-9cf1-92154f741795",
			Unit: "crio-conmon-9521a59b0ccbce3651b96c54ae26f61cd453c5599148e02467476316c73ddcc6.scope",
			Path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod962a6952_437b_48eb_9cf1_92154f741795.slice/crio-conmon-9521a59b0ccbce3651b96c54ae26f61cd453c5599148e02467476316c73ddcc6.scope",
		}},
		{"crio-v1-cgroupfs", Info{
			Runtime: "cri-o", ContainerID: "3234497ae61b917fae5ce361a7a24dd78e1bd2dad2b0d90024eaf3214df92631",
			PodUID: "142aa171-842a-4674-ba1c-06bbac9a60dc",
			Path:   "/kubepods/besteffort/pod142aa171-842a-4674-ba1c-06bbac9a60dc/crio-3234497ae61b917fae5ce361a7a24dd78e1bd2dad2b0d90024eaf3214df92631",
		}},
		{"podman-v2-systemd", Info{
			Runtime: "podman", ContainerID: "9a9f8985973ee89d0a41289712c3a23e8254e7ccd7c02e8a055264a0b0b901e0",
			Path: "/machine.slice/libpod-9a9f8985973ee89d0a41289712c3a23e8254e7ccd7c02e8a055264a0b0b901e0.scope",
		}},
		{"podman-v2-rootless", Info{
			Runtime: "podman", ContainerID: "deff204ddf09c6d4b11ad0507f4ce80ece40637831d26ca40b5f5e8a40ffdee6",
			Path: "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-deff204ddf09c6d4b11ad0507f4ce80ece40637831d26ca40b5f5e8a40ffdee6.scope",
		}},
		{"podman-v2-rootless-container", Info{
			Runtime: "podman", ContainerID: "e4ea93d2655fd39bb0164f85e8f02bfca5bc1158d8ef59af5fc5b20e7d23b468",
			Path: "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-e4ea93d2655fd39bb0164f85e8f02bfca5bc1158d8ef59af5fc5b20e7d23b468.scope/container",
		}},
		{"podman-v2-conmon", Info{
			Runtime: "podman", Unit: "libpod-conmon-9a9f8985973ee89d0a41289712c3a23e8254e7ccd7c02e8a055264a0b0b901e0.scope",
			Path: "/machine.slice/libpod-conmon-9a9f8985973ee89d0a41289712c3a23e8254e7ccd7c02e8a055264a0b0b901e0.scope",
		}},
		{"podman-v1-cgroupfs", Info{
			Runtime: "podman", ContainerID: "3f8bb35d221a474cfe218288a86b583999812688ef65f236d2b95a82fc9bd85e",
			Path: "/libpod_parent/libpod-3f8bb35d221a474cfe218288a86b583999812688ef65f236d2b95a82fc9bd85e",
		}},
		{"systemd-v2-service", Info{Runtime: "systemd", Unit: "myapp.service", Path: "/system.slice/myapp.service"}},
		{"systemd-v2-session", Info{Runtime: "systemd", Unit: "session-3.scope", Path: "/user.slice/user-1000.slice/session-3.scope"}},
		{"systemd-v2-user-manager", Info{Runtime: "systemd", Unit: "user@1000.service", Path: "/user.slice/user-1000.slice/user@1000.service/init.scope"}},
		{"systemd-v1-session", Info{Runtime: "systemd", Unit: "session-1.scope", Path: "/user.slice/user-1000.slice/session-1.scope"}},
		{"slurm-v1-task", Info{Runtime: "slurm", SlurmJobID: "4242", Path: "/slurm/uid_1000/job_4242/step_0/task_0"}},
		{"slurm-v1-multislurmd", Info{Runtime: "slurm", SlurmJobID: "77", Path: "/slurm_node07/uid_1001/job_77/step_2/task_1"}},
		{"slurm-v2-task", Info{Runtime: "slurm", SlurmJobID: "4242", Path: "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"}},
		{"slurm-v2-batch", Info{Runtime: "slurm", SlurmJobID: "4243", Path: "/system.slice/slurmstepd.scope/job_4243/step_batch/user/task_0"}},
		{"slurm-v2-multislurmd", Info{Runtime: "slurm", SlurmJobID: "77", Path: "/system.slice/node07_slurmstepd.scope/job_77/step_3/user/task_1"}},
		{"slurm-v2-stepd", Info{Runtime: "systemd", Unit: "slurmstepd.scope", Path: "/system.slice/slurmstepd.scope/system"}},
	}
	files, err := filepath.Glob("testdata/*.cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != len(tests) {
		t.Errorf("%d fixtures in testdata, %d in the table: every fixture needs an expected Info", len(files), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			f, err := os.Open(filepath.Join("testdata", tt.file+".cgroup"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := Parse(f)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != tt.want {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", "no cgroup lines"},
		{"blank lines only", "\n\n", "no cgroup lines"},
		{"no colon", "0::/\ngarbage\n", `line 2: want "hierarchy-ID:controllers:path", got "garbage"`},
		{"one colon", "12:pids\n", `line 1: want "hierarchy-ID:controllers:path", got "12:pids"`},
		{"hierarchy not a number", "x:pids:/\n", `line 1: hierarchy ID "x" is not a non-negative integer`},
		{"negative hierarchy", "-1:pids:/\n", `line 1: hierarchy ID "-1" is not a non-negative integer`},
		{"v2 with controllers", "0:memory:/a\n", `line 1: hierarchy 0 (cgroup v2) with controllers "memory"`},
		{"relative path", "3:pids:/\n2:rdma:docker/abc\n", `line 2: cgroup path "docker/abc" is not absolute`},
		{"line too long", "0::/" + strings.Repeat("a", maxFileSize) + "\n", "line 1: bufio.Scanner: token too long"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if err == nil {
				t.Fatalf("Parse = %+v, want error %q", got, tt.want)
			}
			if err.Error() != tt.want {
				t.Errorf("error %q, want %q", err, tt.want)
			}
		})
	}
}

func TestParseEdgeCases(t *testing.T) {
	const id = "0941adf29a4c28bf9ed77e2e304828aa111d3afb21ec7df91c91d6c575c861f8"
	tests := []struct {
		name, in string
		want     Info
	}{
		{"no trailing newline", "0::/docker/" + id, Info{Runtime: "docker", ContainerID: id, Path: "/docker/" + id}},
		{"CRLF line end (a copied file)", "0::/system.slice/a.service\r\n",
			Info{Runtime: "systemd", Unit: "a.service", Path: "/system.slice/a.service"}},
		{"uppercase id is not a container id", "0::/docker/" + strings.ToUpper(id), Info{Path: "/docker/" + strings.ToUpper(id)}},
		{"63 hex digits", "0::/docker/" + id[1:], Info{Path: "/docker/" + id[1:]}},
		{"bare id outside docker or kubepods", "0::/ecs/task/" + id, Info{Path: "/ecs/task/" + id}},
		{"docker scope prefix without .scope", "0::/system.slice/docker-" + id, Info{Path: "/system.slice/docker-" + id}},
		{"unknown scope prefix", "0::/system.slice/garden-" + id + ".scope",
			Info{Runtime: "systemd", Unit: "garden-" + id + ".scope", Path: "/system.slice/garden-" + id + ".scope"}},
		{"pod slice without container", "0::/kubepods.slice/kubepods-pod5fc63562_f9d3_48a9_acba_d4251087b898.slice",
			Info{PodUID: "5fc63562-f9d3-48a9-acba-d4251087b898", Path: "/kubepods.slice/kubepods-pod5fc63562_f9d3_48a9_acba_d4251087b898.slice"}},
		{"malformed pod uid", "0::/kubepods/burstable/podnot-a-uid/" + id,
			Info{Runtime: "containerd", ContainerID: id, Path: "/kubepods/burstable/podnot-a-uid/" + id}},
		{"job outside slurm", "0::/system.slice/job_12", Info{Path: "/system.slice/job_12"}},
		{"slurm job with a container inside", "0::/system.slice/slurmstepd.scope/job_9/step_0/user/task_0/docker/" + id,
			Info{Runtime: "docker", ContainerID: id, SlurmJobID: "9", Path: "/system.slice/slurmstepd.scope/job_9/step_0/user/task_0/docker/" + id}},
		{"container with a slurm job inside", "0::/kubepods/pod5fc63562-f9d3-48a9-acba-d4251087b898/" + id + "/system.slice/slurmstepd.scope/job_9/step_0",
			Info{Runtime: "slurm", ContainerID: id, PodUID: "5fc63562-f9d3-48a9-acba-d4251087b898", SlurmJobID: "9",
				Path: "/kubepods/pod5fc63562-f9d3-48a9-acba-d4251087b898/" + id + "/system.slice/slurmstepd.scope/job_9/step_0"}},
		{"v2 wins a tie with v1", "1:name=systemd:/system.slice/a.service\n0::/system.slice/b.service\n",
			Info{Runtime: "systemd", Unit: "b.service", Path: "/system.slice/b.service"}},
		{"earlier v1 line wins a tie", "2:pids:/system.slice/a.service\n1:name=systemd:/system.slice/b.service\n",
			Info{Runtime: "systemd", Unit: "a.service", Path: "/system.slice/a.service"}},
		{"deeper v1 line wins", "2:pids:/a\n1:name=systemd:/a/b/c\n", Info{Path: "/a/b/c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(strings.NewReader(tt.in))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if got != tt.want {
				t.Errorf("Parse:\n got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func TestReadPID(t *testing.T) {
	root := t.TempDir()
	const content = "0::/system.slice/docker-3bb3ca87e1be7e2475061a482c8b3982b7bd290473c7fc84469f4b6b90d52a54.scope\n"
	if err := os.MkdirAll(filepath.Join(root, "4242"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "4242", "cgroup"), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "7", "cgroup"), []byte("0::/\nbroken\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	got, err := ReadPID(root, 4242)
	if err != nil {
		t.Fatalf("ReadPID(4242): %v", err)
	}
	want := Info{
		Runtime: "docker", ContainerID: "3bb3ca87e1be7e2475061a482c8b3982b7bd290473c7fc84469f4b6b90d52a54",
		Path: "/system.slice/docker-3bb3ca87e1be7e2475061a482c8b3982b7bd290473c7fc84469f4b6b90d52a54.scope",
	}
	if got != want {
		t.Errorf("ReadPID(4242):\n got %+v\nwant %+v", got, want)
	}

	_, err = ReadPID(root, 99999)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("ReadPID(missing) error %v, want one wrapping fs.ErrNotExist", err)
	}
	if want := filepath.Join(root, "99999", "cgroup"); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("ReadPID(missing) error %v does not name %s", err, want)
	}

	_, err = ReadPID(root, 7)
	wantErr := "reading " + filepath.Join(root, "7", "cgroup") + `: line 2: want "hierarchy-ID:controllers:path", got "broken"`
	if err == nil || err.Error() != wantErr {
		t.Errorf("ReadPID(7) error %v, want %q", err, wantErr)
	}
	if errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a malformed file must not read as a missing process")
	}
}

func TestParseFileProcessExited(t *testing.T) {
	_, err := parseFile("/proc/31337/cgroup", iotest.ErrReader(syscall.ESRCH))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error %v, want one wrapping fs.ErrNotExist", err)
	}
	if want := "reading /proc/31337/cgroup: process exited: file does not exist"; err == nil || err.Error() != want {
		t.Errorf("error %v, want %q", err, want)
	}
	_, err = parseFile("/proc/31337/cgroup", iotest.ErrReader(syscall.EIO))
	if errors.Is(err, fs.ErrNotExist) || !errors.Is(err, syscall.EIO) {
		t.Errorf("EIO: error %v, want one wrapping EIO and not fs.ErrNotExist", err)
	}
}

// TestReadPIDSelf reads this test process's own cgroup file from the real
// /proc: whatever the machine, it must parse.
func TestReadPIDSelf(t *testing.T) {
	if _, err := os.Stat("/proc/self/cgroup"); err != nil {
		t.Skip("no /proc/self/cgroup here")
	}
	info, err := ReadPID("/proc", os.Getpid())
	if err != nil {
		t.Fatalf("ReadPID(self): %v", err)
	}
	if !strings.HasPrefix(info.Path, "/") {
		t.Errorf("Path %q is not absolute", info.Path)
	}
}

var hex64 = regexp.MustCompile(`^[0-9a-f]{64}$`)

func FuzzParse(f *testing.F) {
	files, err := filepath.Glob("testdata/*.cgroup")
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	runtimes := map[string]bool{"": true, "docker": true, "containerd": true, "cri-o": true, "podman": true, "systemd": true, "slurm": true}
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Parse(strings.NewReader(string(b)))
		if err != nil {
			if info != (Info{}) {
				t.Errorf("error %v with a non-empty Info %+v", err, info)
			}
			return
		}
		if info.ContainerID != "" && !hex64.MatchString(info.ContainerID) {
			t.Errorf("ContainerID %q is not 64 hex digits", info.ContainerID)
		}
		if !runtimes[info.Runtime] {
			t.Errorf("unknown Runtime %q", info.Runtime)
		}
		if info.PodUID != "" && !isPodUID(info.PodUID) {
			t.Errorf("PodUID %q is not a pod UID", info.PodUID)
		}
		if info.SlurmJobID != "" && !isDigits(info.SlurmJobID) {
			t.Errorf("SlurmJobID %q is not a number", info.SlurmJobID)
		}
		if !strings.HasPrefix(info.Path, "/") {
			t.Errorf("Path %q is not absolute", info.Path)
		}
		if (info.ContainerID != "" || info.SlurmJobID != "" || info.Unit != "") && info.Runtime == "" {
			t.Errorf("identity without a runtime: %+v", info)
		}
	})
}

func BenchmarkParse(b *testing.B) {
	data, err := os.ReadFile("testdata/containerd-v1-colon.cgroup")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(strings.NewReader(string(data))); err != nil {
			b.Fatal(err)
		}
	}
}
