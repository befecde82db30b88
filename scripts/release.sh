#!/usr/bin/env bash
# make release, make images (Makefile; README.md#releases).
#
# release.sh DIST PLATFORMS: builds gpulens-exporter, gpulens-loadgen and
# gpulens-verify for each of PLATFORMS ("linux/amd64 linux/arm64") into
# DIST/VERSION/PROGRAM-VERSION.OS-ARCH.tar.gz (a folder of that name holding
# the program, LICENSE, README.md and CHANGELOG.md) and DIST/VERSION/SHA256SUMS
# (sha256sum -c reads it), then prints the images' docker build commands.
# VERSION, REVISION, BUILD_DATE and LDFLAGS come from the Makefile.
#
# A version X.Y.Z (a tag vX.Y.Z on a clean tree, or make release
# VERSION=X.Y.Z) is a release: the CHANGELOG's latest version, the Helm
# chart's version and appVersion and the kustomize images' tags must all be
# X.Y.Z (each mismatch named, nothing built), and the packaged chart joins the
# archives. Any other version (git describe past a tag, a commit, -dirty) is
# a snapshot: built the same, without those checks or the chart.
#
# The archives are reproducible: -trimpath, the commit's date as build date
# and as every file's time in the archive, files sorted, owner 0, gzip
# without a name or time (the chart repacked so too). So two runs on one
# commit, with the same Go and C compilers, give the same SHA256SUMS.
#
# The exporter and verify use cgo (go-nvml loads libnvidia-ml with dlopen);
# the load generator is pure Go, built static as its image is. A platform
# other than the host's needs a C cross compiler for them: CC_OS_ARCH
# (e.g. CC_linux_arm64), by default aarch64-linux-gnu-gcc for linux/arm64
# and x86_64-linux-gnu-gcc for linux/amd64. Every platform's compiler is
# checked (it must compile and link a dlopen call) before anything is built,
# and a missing one is named with the package that provides it.
#
# release.sh --image-commands prints the docker build commands of
# deploy/docker's images, tagged VERSION; release.sh --images runs them, or
# fails saying there is no Docker engine (with the commands, to run where
# there is one).
set -euo pipefail
export LC_ALL=C
cd "$(dirname "$0")/.."

die() {
	echo "release: $*" >&2
	exit 1
}

: "${VERSION:?set by the Makefile}" "${REVISION:?set by the Makefile}" "${BUILD_DATE:?set by the Makefile}"
# VERSION names files and image tags.
[[ $VERSION =~ ^[0-9A-Za-z][0-9A-Za-z.+-]*$ ]] ||
	die "VERSION '$VERSION': use letters, digits, '.', '+' and '-' only (it names the archives and image tags)"

# Image name, Dockerfile: the images of deploy/docker.
images=(
	"gpulens/gpulens-exporter deploy/docker/exporter.Dockerfile"
	"gpulens/gpulens-loadgen deploy/docker/loadgen.Dockerfile"
)

image_commands() {
	local entry image file
	for entry in "${images[@]}"; do
		read -r image file <<<"$entry"
		printf 'docker build -f %s --build-arg VERSION=%s --build-arg REVISION=%s --build-arg BUILD_DATE=%s -t %s:%s .\n' \
			"$file" "$VERSION" "$REVISION" "$BUILD_DATE" "$image" "$VERSION"
	done
}

case "${1:-}" in
--image-commands)
	image_commands
	exit 0
	;;
--images)
	if ! command -v docker >/dev/null 2>&1; then
		die "make images needs a Docker engine and there is no docker command here (install Docker Engine or run these where one is):
$(image_commands)"
	fi
	if ! docker info >/dev/null 2>&1; then
		die "make images needs a Docker engine and none answers (docker info failed: is the daemon running, may this user use it?); the commands:
$(image_commands)"
	fi
	while read -r cmd; do
		echo "+ $cmd"
		read -ra argv <<<"$cmd"
		"${argv[@]}"
	done < <(image_commands)
	exit 0
	;;
esac

[ $# -eq 2 ] || die "usage: release.sh DIST PLATFORMS | --image-commands | --images"
dist=$1
read -ra platforms <<<"$2"
[ ${#platforms[@]} -gt 0 ] || die "RELEASE_PLATFORMS is empty"
: "${LDFLAGS:?set by the Makefile}"

programs=(gpulens-exporter gpulens-loadgen gpulens-verify)
declare -A cgo=([gpulens-exporter]=1 [gpulens-loadgen]=0 [gpulens-verify]=1)
# Debian's packages of the default cross compilers.
declare -A cross_packages=(
	[linux/arm64]="gcc-aarch64-linux-gnu libc6-dev-arm64-cross"
	[linux/amd64]="gcc-x86-64-linux-gnu libc6-dev-amd64-cross"
)
declare -A cross_cc=([linux/arm64]=aarch64-linux-gnu-gcc [linux/amd64]=x86_64-linux-gnu-gcc)

# A release: the version everything that names one says.
if [[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
	release=1
	chart=deploy/kubernetes/helm/gpulens/Chart.yaml
	problems=()
	got=$(sed -n 's/^## \[\([0-9][^]]*\)\].*/\1/p' CHANGELOG.md | head -n 1)
	[ "$got" = "$VERSION" ] || problems+=("CHANGELOG.md: the latest version section is [${got:-none}], want [$VERSION] (move [Unreleased]'s entries under ## [$VERSION] - YYYY-MM-DD)")
	for field in version appVersion; do
		got=$(sed -n "s/^$field:[[:space:]]*\"\{0,1\}\([^\"]*\)\"\{0,1\}[[:space:]]*\$/\1/p" "$chart")
		[ "$got" = "$VERSION" ] || problems+=("$chart: $field is '${got:-missing}', want $VERSION")
	done
	for f in deploy/kubernetes/base/daemonset.yaml deploy/kubernetes/loadgen/job.yaml; do
		while read -r ref; do
			[ "${ref##*:}" = "$VERSION" ] || problems+=("$f: image $ref, want tag $VERSION")
		done < <(grep -o 'gpulens/gpulens-[a-z]*:[^"[:space:]]*' "$f")
	done
	if [ ${#problems[@]} -gt 0 ]; then
		die "version $VERSION is not what the repository says:
$(printf '  %s\n' "${problems[@]}")"
	fi
else
	release=0
	echo "release: $VERSION is a snapshot (not X.Y.Z: no vX.Y.Z tag on this commit, or uncommitted changes): built without the version checks and the Helm chart; tag vX.Y.Z or give VERSION=X.Y.Z for a release"
fi

# Every platform's C compiler works before anything is built.
hostplatform=$(go env GOHOSTOS)/$(go env GOHOSTARCH)
declare -A ccs=()
missing=()
probe_c=$(mktemp --suffix=.c)
trap 'rm -f "$probe_c"' EXIT
printf '#include <dlfcn.h>\n#include <stdlib.h>\nint main(void) { return dlopen("libnvidia-ml.so.1", RTLD_LAZY) == NULL ? EXIT_FAILURE : EXIT_SUCCESS; }\n' >"$probe_c"
for p in "${platforms[@]}"; do
	[[ $p =~ ^[a-z0-9]+/[a-z0-9]+$ ]] || die "RELEASE_PLATFORMS: '$p' is not OS/ARCH (e.g. linux/arm64)"
	var=""
	if [ "$p" = "$hostplatform" ]; then
		cc=$(go env CC)
	else
		var="CC_${p%/*}_${p#*/}"
		cc=${!var:-${cross_cc[$p]:-}}
		[ -n "$cc" ] || {
			missing+=("$p: no C cross compiler known for it; name one with $var=... (the exporter and verify need cgo)")
			continue
		}
	fi
	ccs[$p]=$cc
	if ! command -v "$cc" >/dev/null 2>&1; then
		hint="name another with ${var:-CC}=..."
		[ -n "${cross_packages[$p]:-}" ] && hint="install it with: sudo apt-get install ${cross_packages[$p]} (Debian, Ubuntu), or $hint"
		missing+=("$p: the C compiler $cc is not found ($hint); gpulens-exporter and gpulens-verify use cgo (go-nvml)")
	elif ! out=$("$cc" -o /dev/null "$probe_c" -ldl 2>&1); then
		hint=""
		[ -n "${cross_packages[$p]:-}" ] && hint=" (the C library for it: sudo apt-get install ${cross_packages[$p]})"
		missing+=("$p: $cc cannot build a C program that calls dlopen$hint: ${out%%$'\n'*}")
	fi
done
if [ ${#missing[@]} -gt 0 ]; then
	die "cannot build every platform of RELEASE_PLATFORMS (${platforms[*]}):
$(printf '  %s\n' "${missing[@]}")
  or leave a platform out: make release RELEASE_PLATFORMS=$hostplatform"
fi

out=$dist/$VERSION
work=$(mktemp -d)
trap 'rm -f "$probe_c"; rm -rf "$work"' EXIT
rm -rf "$out"
mkdir -p "$out"
epoch=$(git log -1 --format=%ct 2>/dev/null || echo 0)
for p in "${platforms[@]}"; do
	os=${p%/*} arch=${p#*/}
	for prog in "${programs[@]}"; do
		name=$prog-$VERSION.$os-$arch
		echo "release: $name"
		mkdir "$work/$name"
		CGO_ENABLED=${cgo[$prog]} GOOS=$os GOARCH=$arch CC=${ccs[$p]} \
			go build -trimpath -ldflags "$LDFLAGS -s -w" -o "$work/$name/$prog" "./cmd/$prog"
		cp LICENSE README.md CHANGELOG.md "$work/$name/"
		chmod 0644 "$work/$name"/*.md "$work/$name/LICENSE"
		chmod 0755 "$work/$name" "$work/$name/$prog"
		tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=gnu \
			-C "$work" -cf - "$name" | gzip -9 -n >"$out/$name.tar.gz"
	done
done
if [ "$release" = 1 ]; then
	echo "release: Helm chart"
	# helm package dates every file now: repacked as the archives are.
	go tool -modfile=tools/go.mod helm package deploy/kubernetes/helm/gpulens --destination "$work/chart" >/dev/null
	mkdir "$work/chart/x"
	tar -xzmf "$work/chart/gpulens-$VERSION.tgz" -C "$work/chart/x"
	tar --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner --format=gnu \
		-C "$work/chart/x" -cf - gpulens | gzip -9 -n >"$out/gpulens-$VERSION.tgz"
fi
(cd "$out" && sha256sum -- *.t*gz >SHA256SUMS)

echo "release: $out"
(cd "$out" && ls -l -- *)
echo "release: SHA256SUMS"
cat "$out/SHA256SUMS"
echo "release: the images (make images VERSION=$VERSION runs these; needs a Docker engine):"
image_commands
