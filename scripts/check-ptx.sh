#!/usr/bin/env bash
# make check-ptx: checks the probe's PTX kernels and its libcuda binding
# against NVIDIA's real tools, on a machine without a GPU or a CUDA install:
#   1. fetches Debian's nvidia-cuda-toolkit (for ptxas) and libcuda1 (the
#      userspace driver) from the non-free/contrib components of the Debian
#      archive the system's apt already uses, with a private apt
#      configuration (the system's sources, lists and cache are untouched),
#      unpacks them with dpkg -x and keeps ptxas, nvdisasm and libcuda in
#      $CHECK_PTX_CACHE (default .scratch/cuda, ~100 MB, kept between runs:
#      later runs need no network);
#   2. writes the PTX modules of internal/gpuprobe (ptxBase, ptxTensor) to
#      files and assembles each with ptxas for every target architecture
#      (base: sm_75, sm_80, sm_86, sm_89, sm_90, the architectures a current
#      driver still runs; tensor: the same from sm_80), warnings as errors,
#      printing ptxas -v's register and memory usage per kernel, and checks
#      the machine code (nvdisasm): nothing folded away, the copy kernel's
#      CopyUnroll 16-byte loads in flight, its registers few enough for a
#      full SM (64K registers over the SM's thread limit, in the 8-register
#      allocation unit: 32 on sm_80 and sm_90 (2048 threads), 40 on sm_86
#      and sm_89 (1536), 64 on sm_75 (1024));
#   3. runs the gpuprobe tests that load the real libcuda (GPULENS_LIBCUDA):
#      here cuInit must fail with CUDA_ERROR_NO_DEVICE; on a GPU machine they
#      list the devices and run the kernels.
# Needs apt-get and dpkg (Debian or a derivative) the first time.
set -euo pipefail
cd "$(dirname "$0")/.."

cache=${CHECK_PTX_CACHE:-.scratch/cuda}
root=$cache/root
GO=${GO:-go}
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }

find_ptxas() {
	local p
	for p in "$root"/usr/lib/nvidia-cuda-toolkit/bin/ptxas "$root"/usr/bin/ptxas; do
		if [ -f "$p" ] && [ -x "$p" ]; then
			echo "$p"
			return 0
		fi
	done
	return 1
}
find_libcuda() {
	find "$root" -name 'libcuda.so.[0-9]*.*' -type f 2>/dev/null | sort | tail -n1
}

fetch() {
	command -v apt-get >/dev/null && command -v dpkg >/dev/null || {
		echo "check-ptx: needs apt-get and dpkg to fetch ptxas and libcuda (or a filled $cache)" >&2
		exit 2
	}
	local codename uri apt pkgdir
	codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
	if [ -z "$codename" ]; then
		echo "check-ptx: no VERSION_CODENAME in /etc/os-release" >&2
		exit 2
	fi
	# The Debian archive URI the system's apt is configured with, for this release.
	uri=$(apt-get indextargets --no-release-info --format '$(REPO_URI) $(RELEASE) $(TARGET_OF)' |
		awk -v rel="$codename" '$2 == rel && $3 == "deb" { print $1; exit }')
	if [ -z "$uri" ]; then
		echo "check-ptx: no apt source for Debian $codename is configured" >&2
		exit 2
	fi
	local keyring=/usr/share/keyrings/debian-archive-keyring.gpg
	[ -r "$keyring" ] || { echo "check-ptx: $keyring missing (package debian-archive-keyring)" >&2; exit 2; }
	mkdir -p "$cache/apt/lists/partial" "$cache/apt/cache/archives/partial" "$cache/debs"
	echo "deb [signed-by=$keyring] $uri $codename main contrib non-free" >"$cache/apt/sources.list"
	apt=(apt-get -q -o "Dir::Etc::SourceList=$(realpath "$cache/apt/sources.list")"
		-o Dir::Etc::SourceParts=/dev/null
		-o "Dir::State::Lists=$(realpath "$cache/apt/lists")"
		-o "Dir::Cache=$(realpath "$cache/apt/cache")"
		-o APT::Sandbox::User=root)
	step "apt-get update (private lists) from $uri $codename main contrib non-free"
	"${apt[@]}" update >"$cache/apt/update.log" 2>&1 || { cat "$cache/apt/update.log" >&2; exit 1; }
	step "apt-get download libcuda1 nvidia-cuda-toolkit"
	pkgdir=$(realpath "$cache/debs")
	rm -f "$pkgdir"/*.deb
	(cd "$pkgdir" && "${apt[@]}" download libcuda1 nvidia-cuda-toolkit)
	rm -rf "$root.tmp"
	mkdir -p "$root.tmp"
	local deb
	for deb in "$pkgdir"/*.deb; do
		step "dpkg -x $(basename "$deb")"
		dpkg -x "$deb" "$root.tmp"
	done
	# Keep what this check runs (ptxas, nvdisasm, libcuda: ~100 MB of ~200).
	find "$root.tmp" ! -type d ! -name ptxas ! -name nvdisasm ! -name 'libcuda.so*' -delete
	find "$root.tmp" -type d -empty -delete
	rm -rf "$root" "$pkgdir" "$cache/apt"
	mv "$root.tmp" "$root"
}

ptxas=$(find_ptxas || true)
libcuda=$(find_libcuda || true)
if [ -z "$ptxas" ] || [ -z "$libcuda" ]; then
	fetch
	ptxas=$(find_ptxas)
	libcuda=$(find_libcuda)
else
	step "using cached ptxas and libcuda under $root"
fi
[ -n "$ptxas" ] || { echo "check-ptx: no ptxas under $root" >&2; exit 1; }
[ -n "$libcuda" ] || { echo "check-ptx: no libcuda.so.* under $root" >&2; exit 1; }
"$ptxas" --version | tail -n2
echo "libcuda: $libcuda"

step "writing the PTX modules"
ptxdir=$cache/ptx
rm -rf "$ptxdir"
mkdir -p "$ptxdir"
if ! out=$(GPULENS_PTX_OUT=$(realpath "$ptxdir") $GO test -count=1 -timeout=10m -run '^TestWritePTX$' ./internal/gpuprobe/ 2>&1); then
	echo "$out" >&2
	exit 1
fi
for f in base tensor; do
	[ -s "$ptxdir/$f.ptx" ] || { echo "check-ptx: $ptxdir/$f.ptx not written" >&2; exit 1; }
done

fail=0
nvdisasm=$(dirname "$ptxas")/nvdisasm
assemble() { # module arch
	local out rc=0
	out=$("$ptxas" -v --warn-on-spills --warning-as-error -arch="$2" -o "$ptxdir/$1.$2.cubin" "$ptxdir/$1.ptx" 2>&1) || rc=$?
	if [ $rc -ne 0 ]; then
		echo "FAIL: ptxas $1.ptx -arch=$2 (exit $rc)"
		echo "$out"
		fail=1
		return
	fi
	echo "ok:   ptxas $1.ptx -arch=$2"
	# Per kernel: "gpulens_fma  Used 23 registers, 368 bytes cmem[0]  0 bytes stack frame, ..."
	echo "$out" | awk '
		/Compiling entry function/ { split($0, q, "'\''"); k = q[2] }
		/bytes stack frame/ { sub(/^ +/, ""); frame[k] = $0 }
		/Used [0-9]+ registers/ { sub(/.*Used/, "Used"); printf "      %-18s %s; %s\n", k, $0, frame[k] }'
	echo "$out" >"$ptxdir/$1.$2.ptxas-v"
}
# regs KERNEL MODULE ARCH MAX: ptxas -v reports at most MAX registers for the
# kernel (so that its blocks fill an SM).
regs() {
	local n
	n=$(awk -v k="$1" '
		/Compiling entry function/ { split($0, q, "'\''"); cur = q[2] }
		/Used [0-9]+ registers/ && cur == k { sub(/.*Used /, ""); print $1 + 0; exit }' "$ptxdir/$2.$3.ptxas-v")
	if [ -n "$n" ] && [ "$n" -le "$4" ]; then
		echo "ok:   $3 $1: $n registers, at most $4 (a full SM of threads)"
	else
		echo "FAIL: $3 $1: ${n:-?} registers, want at most $4"
		fail=1
	fi
}
# sass KERNEL MODULE ARCH REGEX MIN WHAT: the kernel's machine code has at
# least MIN instructions matching REGEX (nothing was folded away).
sass() {
	local dump=$ptxdir/$2.$3.sass n
	[ -s "$dump" ] || "$nvdisasm" "$ptxdir/$2.$3.cubin" >"$dump"
	# nvdisasm heads each kernel with "//---...--- .text.KERNEL ---...".
	n=$(awk -v k=".text.$1" '/^\/\/-+ \.text\./ { in_k = ($2 == k) } in_k' "$dump" | grep -cE "$4" || true)
	if [ "$n" -ge "$5" ]; then
		echo "ok:   $3 $1: $n × $6"
	else
		echo "FAIL: $3 $1: $n × $6, want at least $5"
		fail=1
	fi
}
step "ptxas"
for arch in sm_75 sm_80 sm_86 sm_89 sm_90; do
	assemble base "$arch"
	[ -s "$ptxdir/base.$arch.cubin" ] || continue
	sass gpulens_fma base "$arch" '\bFFMA\b' $((8 * 8 + 8)) "FFMA (8 chains x (8 unrolled + 1 tail))"
	sass gpulens_copy base "$arch" 'LDG\.E\.128' $((4 + 1)) "16-byte load (4 in flight + 1 tail)"
	sass gpulens_copy base "$arch" 'STG\.E\.128' $((4 + 1)) "16-byte store (4 + 1 tail)"
	case $arch in
	sm_75) maxregs=64 ;;
	sm_86 | sm_89) maxregs=40 ;;
	*) maxregs=32 ;;
	esac
	regs gpulens_copy base "$arch" "$maxregs"
	sass gpulens_stolen base "$arch" 'SR_GLOBALTIMER' 2 "%globaltimer read"
done
for arch in sm_80 sm_86 sm_89 sm_90; do
	assemble tensor "$arch"
	[ -s "$ptxdir/tensor.$arch.cubin" ] || continue
	sass gpulens_mma_f16 tensor "$arch" 'HMMA\.16816\.F32 ' $((4 * 4 + 4)) "HMMA.16816.F32 (4 chains x (4 unrolled + 1 tail))"
	sass gpulens_mma_bf16 tensor "$arch" 'HMMA\.16816\.F32\.BF16 ' $((4 * 4 + 4)) "HMMA.16816.F32.BF16"
done

step "gpuprobe tests against the real libcuda ($(basename "$libcuda"))"
libdir=$(realpath "$(dirname "$libcuda")")
rc=0
GPULENS_LIBCUDA=$(realpath "$libcuda") LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
	$GO test -count=1 -timeout=10m -v -run '^TestRealLibcuda' ./internal/gpuprobe/ >"$cache/libcuda-test.log" 2>&1 || rc=$?
sed 's/^/      /' "$cache/libcuda-test.log"
if [ $rc -ne 0 ]; then
	echo "FAIL: go test -run '^TestRealLibcuda' (exit $rc)"
	fail=1
elif ! grep -q '^--- PASS: TestRealLibcuda' "$cache/libcuda-test.log"; then
	echo "FAIL: the real-libcuda tests did not run"
	fail=1
fi

step "done"
if [ $fail = 0 ]; then echo "check-ptx: PASS"; else echo "check-ptx: FAIL"; fi
exit $fail
