package deploy

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/gpulens/gpulens/internal/testenv"
)

// The release (README.md#releases, scripts/release.sh): what names a
// version agrees, every program's --version reports what the Makefile's
// LDFLAGS set, and the images are built with the same settings.

const versionPkg = "github.com/prometheus/common/version"

var (
	changelogVersion = regexp.MustCompile(`^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$`)
	imageRef         = regexp.MustCompile(`gpulens/gpulens-[a-z]+:[^"\s]+`)
)

// changelogVersions are CHANGELOG.md's version sections, newest first, after
// checking its Keep a Changelog form: the title, [Unreleased] first, each
// version X.Y.Z with a date, versions and dates descending, a link for each.
func changelogVersions(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	var versions, dates []string
	links := map[string]bool{}
	sawUnreleased := false
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case n == 1 && line != "# Changelog":
			t.Errorf("CHANGELOG.md:1: %q, want # Changelog", line)
		case line == "## [Unreleased]":
			if sawUnreleased || len(versions) > 0 {
				t.Errorf("CHANGELOG.md:%d: [Unreleased] must come once, before every version", n)
			}
			sawUnreleased = true
		case strings.HasPrefix(line, "## "):
			m := changelogVersion.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("CHANGELOG.md:%d: %q, want ## [X.Y.Z] - YYYY-MM-DD", n, line)
				continue
			}
			if _, err := time.Parse(time.DateOnly, m[2]); err != nil {
				t.Errorf("CHANGELOG.md:%d: date %s: %v", n, m[2], err)
			}
			versions, dates = append(versions, m[1]), append(dates, m[2])
		case strings.HasPrefix(line, "[") && strings.Contains(line, "]: https://"):
			links[strings.ToLower(line[1:strings.Index(line, "]")])] = true
		}
	}
	if !sawUnreleased {
		t.Error("CHANGELOG.md has no ## [Unreleased] section")
	}
	if len(versions) == 0 {
		t.Fatal("CHANGELOG.md has no version section")
	}
	for i := 1; i < len(versions); i++ {
		if compareSemver(versions[i-1], versions[i]) <= 0 || dates[i-1] < dates[i] {
			t.Errorf("CHANGELOG.md: [%s] - %s above [%s] - %s: want the newest first", versions[i-1], dates[i-1], versions[i], dates[i])
		}
	}
	for _, v := range append([]string{"unreleased"}, versions...) {
		if !links[v] {
			t.Errorf("CHANGELOG.md: no link [%s]: https://...", v)
		}
	}
	return versions
}

// compareSemver compares two X.Y.Z versions.
func compareSemver(a, b string) int {
	num := func(v string) []int {
		var out []int
		for _, f := range strings.Split(v, ".") {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(num(a), num(b))
}

// The version a release is cut at is the one everything names: the
// CHANGELOG's latest, the Helm chart's version and appVersion (the image tag
// the chart deploys by default) and the kustomize images' tags.
func TestReleaseVersionsAgree(t *testing.T) {
	latest := changelogVersions(t)[0]
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy", "kubernetes", "helm", "gpulens", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != latest || chart.AppVersion != latest {
		t.Errorf("Chart.yaml version %q appVersion %q; want the CHANGELOG's latest version %s in both", chart.Version, chart.AppVersion, latest)
	}
	for _, f := range []string{"kubernetes/base/daemonset.yaml", "kubernetes/loadgen/job.yaml"} {
		b, err := os.ReadFile(filepath.Join(root, "deploy", f))
		if err != nil {
			t.Fatal(err)
		}
		refs := imageRef.FindAllString(string(b), -1)
		if len(refs) == 0 {
			t.Errorf("%s: no gpulens image", f)
		}
		for _, ref := range refs {
			if tag := ref[strings.LastIndex(ref, ":")+1:]; tag != latest {
				t.Errorf("%s: image %s; want tag %s (the CHANGELOG's latest version)", f, ref, latest)
			}
		}
	}
}

// make release with a version X.Y.Z that the repository does not name
// refuses before it builds anything, naming every file that disagrees.
func TestReleaseRefusesAnUnnamedVersion(t *testing.T) {
	dist := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := testenv.CombinedOutput(ctx, []string{"VERSION=99.0.0", "REVISION=0123456789abcdef", "BUILD_DATE=2026-01-02T03:04:05Z", "LDFLAGS=-s"},
		"bash", filepath.Join(root, "scripts", "release.sh"), dist, "linux/amd64")
	if err == nil {
		t.Fatalf("release.sh succeeded with version 99.0.0:\n%s", out)
	}
	for _, want := range []string{
		"CHANGELOG.md: the latest version section is [",
		"Chart.yaml: version is '",
		"Chart.yaml: appVersion is '",
		"deploy/kubernetes/base/daemonset.yaml: image gpulens/gpulens-exporter:",
		"deploy/kubernetes/loadgen/job.yaml: image gpulens/gpulens-loadgen:",
	} {
		if !strings.Contains(string(out), want) {
			t.Errorf("release.sh's refusal does not say %q:\n%s", want, out)
		}
	}
	if entries, err := os.ReadDir(dist); err != nil || len(entries) != 0 {
		t.Errorf("release.sh wrote %v (%v) before refusing", entries, err)
	}
}

// makeVars runs make print-version with the given variables and returns
// what it prints (VERSION, REVISION, BUILD_DATE, LDFLAGS). A make above
// (make test VERSION=...) passes nothing down: MAKEFLAGS is emptied.
func makeVars(t *testing.T, vars ...string) map[string]string {
	t.Helper()
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, stderr, err := testenv.Output(ctx, []string{"MAKEFLAGS=", "MFLAGS=", "MAKELEVEL="}, "make",
		append([]string{"-s", "-C", root, "print-version"}, vars...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	got := map[string]string{}
	for line := range strings.Lines(string(out)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok {
			got[k] = v
		}
	}
	for _, k := range []string{"VERSION", "REVISION", "BUILD_DATE", "LDFLAGS"} {
		if _, ok := got[k]; !ok {
			t.Fatalf("make print-version printed no %s:\n%s", k, out)
		}
	}
	return got
}

// ldflagsX are the -X settings of prometheus/common/version in an ldflags
// string (Go's or a Dockerfile's): name (Version, BuildDate, ...) to value.
func ldflagsX(s string) map[string]string {
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`-X\s+`+regexp.QuoteMeta(versionPkg)+`\.(\w+)=(\S+)`).FindAllStringSubmatch(s, -1) {
		out[m[1]] = strings.Trim(m[2], `"`)
	}
	return out
}

// Each program's --version reports the version, commit and build date the
// Makefile's LDFLAGS set (built with them, fixed values, so the build cache
// links each once).
func TestVersionFlag(t *testing.T) {
	want := map[string]string{"VERSION": "9.8.7-test", "REVISION": "0123456789abcdef0123456789abcdef01234567", "BUILD_DATE": "2026-01-02T03:04:05Z"}
	var vars []string
	for k, v := range want {
		vars = append(vars, k+"="+v)
	}
	sort.Strings(vars)
	ldflags := makeVars(t, vars...)["LDFLAGS"]
	x := ldflagsX(ldflags)
	for k, v := range map[string]string{"Version": want["VERSION"], "Revision": want["REVISION"], "BuildDate": want["BUILD_DATE"], "Branch": "main"} {
		if x[k] != v {
			t.Errorf("Makefile LDFLAGS set %s.%s to %q, want %q: %s", versionPkg, k, x[k], v, ldflags)
		}
	}
	for _, name := range []string{"gpulens-exporter", "gpulens-loadgen", "gpulens-verify"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bin := testenv.BinaryLDFlags(t, name, ldflags)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			out, err := testenv.CombinedOutput(ctx, nil, bin, "--version")
			if err != nil {
				t.Fatalf("%v\n%s", err, out)
			}
			for _, re := range []string{
				`^` + name + `, version ` + regexp.QuoteMeta(want["VERSION"]) + ` \(branch: main, revision: ` + want["REVISION"] + `\)\n`,
				`\n\s*build date:\s+` + regexp.QuoteMeta(want["BUILD_DATE"]) + `\n`,
			} {
				if !regexp.MustCompile(re).Match(out) {
					t.Errorf("%s --version does not match %s:\n%s", name, re, out)
				}
			}
		})
	}
}

// The build date is the commit's, not the clock's: two builds of one
// commit are the same bytes (make release's checksums).
func TestBuildDateIsTheCommits(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	commit, _, err := testenv.Output(ctx, nil, "git", "-C", root, "log", "-1", "--format=%H %cI")
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	rev, date, _ := strings.Cut(strings.TrimSpace(string(commit)), " ")
	got := makeVars(t)
	if got["REVISION"] != rev || got["BUILD_DATE"] != date {
		t.Errorf("make: REVISION %q BUILD_DATE %q; want the commit's %s and %s", got["REVISION"], got["BUILD_DATE"], rev, date)
	}
	if x := ldflagsX(got["LDFLAGS"]); x["BuildDate"] != date || x["Revision"] != rev || x["Version"] != got["VERSION"] {
		t.Errorf("make LDFLAGS %q; want Version %s, Revision %s, BuildDate %s", got["LDFLAGS"], got["VERSION"], rev, date)
	}
}

// dockerStage is one FROM ... stage of a Dockerfile: its instructions
// (continuation lines joined) and the build arguments it declares.
type dockerStage struct {
	instructions []string
	args         map[string]bool
}

func dockerStages(t *testing.T, path string) []dockerStage {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var stages []dockerStage
	var cur strings.Builder
	for line := range strings.Lines(string(b)) {
		line = strings.TrimSpace(line)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if rest, ok := strings.CutSuffix(line, `\`); ok {
			cur.WriteString(rest + " ")
			continue
		}
		cur.WriteString(line)
		ins := cur.String()
		cur.Reset()
		if strings.HasPrefix(ins, "FROM ") {
			stages = append(stages, dockerStage{args: map[string]bool{}})
			continue
		}
		if len(stages) == 0 {
			continue // an ARG for FROM lines
		}
		st := &stages[len(stages)-1]
		st.instructions = append(st.instructions, ins)
		if name, ok := strings.CutPrefix(ins, "ARG "); ok {
			name, _, _ = strings.Cut(name, "=")
			st.args[name] = true
		}
	}
	return stages
}

// Each image is built as the release is: its go build sets the same
// prometheus/common/version variables as the Makefile, from build arguments
// declared in the stage that uses them (an undeclared one is silently
// empty); the image's OCI labels carry the version, commit and date; it
// holds the licence; and make release's docker build commands pass every
// build argument and tag the image with the version.
func TestImagesCarryTheVersion(t *testing.T) {
	makeX := ldflagsX(makeVars(t, "VERSION=1", "REVISION=2", "BUILD_DATE=3")["LDFLAGS"])
	var names []string
	for k := range makeX {
		names = append(names, k)
	}
	sort.Strings(names)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmds, err := testenv.CombinedOutput(ctx, []string{"VERSION=1.2.3", "REVISION=abc123", "BUILD_DATE=2026-01-02T03:04:05Z"},
		"bash", filepath.Join(root, "scripts", "release.sh"), "--image-commands")
	if err != nil {
		t.Fatalf("%v\n%s", err, cmds)
	}

	files, err := filepath.Glob(filepath.Join(root, "deploy", "docker", "*.Dockerfile"))
	if err != nil || len(files) != 2 {
		t.Fatalf("Dockerfiles %v, %v; want exporter and loadgen", files, err)
	}
	argRef := regexp.MustCompile(`\$\{?(\w+)\}?`)
	for _, f := range files {
		base := filepath.Base(f)
		t.Run(base, func(t *testing.T) {
			stages := dockerStages(t, f)
			allArgs := map[string]bool{}
			var builds int
			for i, st := range stages {
				for k := range st.args {
					allArgs[k] = true
				}
				for _, ins := range st.instructions {
					if !strings.HasPrefix(ins, "RUN ") && !strings.HasPrefix(ins, "LABEL ") {
						continue
					}
					for _, m := range argRef.FindAllStringSubmatch(ins, -1) {
						if !st.args[m[1]] {
							t.Errorf("stage %d uses $%s, which it does not declare (ARG %s): empty in the image", i+1, m[1], m[1])
						}
					}
					if !strings.Contains(ins, "go build") {
						continue
					}
					builds++
					x := ldflagsX(ins)
					var got []string
					for k := range x {
						got = append(got, k)
					}
					sort.Strings(got)
					if !slices.Equal(got, names) {
						t.Errorf("go build sets %s.%v; the Makefile sets %v", versionPkg, got, names)
					}
					for k, arg := range map[string]string{"Version": "${VERSION}", "Revision": "${REVISION}", "BuildDate": "${BUILD_DATE}"} {
						if x[k] != arg {
							t.Errorf("go build sets %s=%q, want %s", k, x[k], arg)
						}
					}
				}
			}
			if builds != 1 {
				t.Errorf("%d go builds, want 1", builds)
			}
			final := stages[len(stages)-1]
			labels := strings.Join(slices.DeleteFunc(slices.Clone(final.instructions), func(s string) bool { return !strings.HasPrefix(s, "LABEL ") }), " ")
			for _, l := range []string{
				`org.opencontainers.image.version="${VERSION}"`,
				`org.opencontainers.image.revision="${REVISION}"`,
				`org.opencontainers.image.created="${BUILD_DATE}"`,
				`org.opencontainers.image.licenses="Apache-2.0"`,
			} {
				if !strings.Contains(labels, l) {
					t.Errorf("final stage has no label %s (labels: %s)", l, labels)
				}
			}
			if !slices.Contains(final.instructions, "COPY LICENSE /LICENSE") {
				t.Error("final stage does not copy LICENSE")
			}

			rel := "deploy/docker/" + base
			var cmd string
			for line := range strings.Lines(string(cmds)) {
				if strings.Contains(line, "-f "+rel+" ") {
					cmd = strings.TrimSpace(line)
				}
			}
			if cmd == "" {
				t.Fatalf("release.sh --image-commands builds no %s:\n%s", rel, cmds)
			}
			var passed []string
			for _, m := range regexp.MustCompile(`--build-arg (\w+)=`).FindAllStringSubmatch(cmd, -1) {
				passed = append(passed, m[1])
			}
			var declared []string
			for k := range allArgs {
				declared = append(declared, k)
			}
			sort.Strings(passed)
			sort.Strings(declared)
			if !slices.Equal(passed, declared) {
				t.Errorf("%s passes build args %v; the Dockerfile declares %v", cmd, passed, declared)
			}
			image := "gpulens/gpulens-" + strings.TrimSuffix(base, ".Dockerfile")
			if !strings.Contains(cmd, fmt.Sprintf(" -t %s:1.2.3 ", image)) || !strings.HasSuffix(cmd, " .") {
				t.Errorf("%s: want -t %s:1.2.3 and the repository root as context", cmd, image)
			}
		})
	}
}
