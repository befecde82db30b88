package report

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
)

func listDir(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestWriteKinds writes to every kind of path: new and regular files are
// replaced atomically (a regular file keeps its permissions), a symlink
// stays a link and its target is written, a FIFO stays a FIFO and its
// reader gets the bytes; directories, sockets and dangling links are
// refused by Check and Write alike. Check never leaves anything behind.
func TestWriteKinds(t *testing.T) {
	const content = "{\"runs\": []}\n"
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, dir string) string // returns the path to write
		wantErr string                                // "" for success
		// after checks the path (and what it points to) once written.
		after func(t *testing.T, path string)
	}{
		{name: "new file", setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "r.json") },
			after: func(t *testing.T, path string) {
				fi, err := os.Lstat(path)
				if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
					t.Errorf("new file: %v %v, want a regular 0644 file", fi.Mode(), err)
				}
			}},
		{name: "regular file keeps its permissions", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "r.json")
			if err := os.WriteFile(p, []byte("old content, longer than the new one"), 0o600); err != nil {
				t.Fatal(err)
			}
			return p
		}, after: func(t *testing.T, path string) {
			if fi, _ := os.Lstat(path); fi.Mode().Perm() != 0o600 {
				t.Errorf("mode %v, want the file's 0600 kept", fi.Mode())
			}
		}},
		{name: "symlink to a regular file stays a link", setup: func(t *testing.T, dir string) string {
			target := filepath.Join(dir, "kept", "r.json")
			if err := os.Mkdir(filepath.Dir(target), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(target, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
			link := filepath.Join(dir, "link.json")
			if err := os.Symlink(target, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, after: func(t *testing.T, path string) {
			if fi, _ := os.Lstat(path); fi.Mode()&fs.ModeSymlink == 0 {
				t.Errorf("%s is no longer a symlink: %v", path, fi.Mode())
			}
			if b, _ := os.ReadFile(filepath.Join(filepath.Dir(path), "kept", "r.json")); string(b) != content {
				t.Errorf("link target holds %q, want %q", b, content)
			}
		}},
		{name: "directory", setup: func(t *testing.T, dir string) string { return dir }, wantErr: "is a directory"},
		{name: "symlink to a directory", setup: func(t *testing.T, dir string) string {
			link := filepath.Join(dir, "d")
			if err := os.Symlink(dir, link); err != nil {
				t.Fatal(err)
			}
			return link
		}, wantErr: "is a directory"},
		{name: "dangling symlink", setup: func(t *testing.T, dir string) string {
			link := filepath.Join(dir, "dangling.json")
			if err := os.Symlink(filepath.Join(dir, "nowhere", "x"), link); err != nil {
				t.Fatal(err)
			}
			return link
		}, wantErr: "symbolic link to a missing file"},
		{name: "missing directory", setup: func(t *testing.T, dir string) string { return filepath.Join(dir, "missing", "r.json") },
			wantErr: "does not exist"},
		{name: "parent is a file", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "file")
			if err := os.WriteFile(p, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(p, "r.json")
		}, wantErr: "not a directory"},
		{name: "socket", setup: func(t *testing.T, dir string) string {
			p := filepath.Join(dir, "s.sock")
			ln, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { ln.Close() })
			return p
		}, wantErr: "is a socket"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			path := tc.setup(t, dir)
			before := listDir(t, dir)
			err := Check(path)
			if after := listDir(t, dir); !slices.Equal(before, after) {
				t.Errorf("Check changed the directory: %v → %v", before, after)
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Check = %v, want %q", err, tc.wantErr)
				}
				if err := WriteBytes(path, []byte(content)); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("Write = %v, want %q", err, tc.wantErr)
				}
				if after := listDir(t, dir); !slices.Equal(before, after) {
					t.Errorf("a refused Write changed the directory: %v → %v", before, after)
				}
				return
			}
			if err != nil {
				t.Fatalf("Check = %v", err)
			}
			if err := WriteBytes(path, []byte(content)); err != nil {
				t.Fatal(err)
			}
			if b, err := os.ReadFile(path); err != nil || string(b) != content {
				t.Errorf("read back %q, %v; want %q", b, err, content)
			}
			for _, name := range listDir(t, dir) {
				if strings.HasSuffix(name, ".tmp") || strings.HasPrefix(name, ".gpulens-check-") {
					t.Errorf("temporary file %s left behind", name)
				}
			}
			if tc.after != nil {
				tc.after(t, path)
			}
		})
	}
}

// TestWriteFIFOInPlace: a FIFO is written in place (its reader gets the
// bytes) and is still a FIFO afterwards, never replaced by a regular file.
func TestWriteFIFOInPlace(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "out.fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	if err := Check(fifo); err != nil {
		t.Fatalf("Check(fifo) = %v", err)
	}
	got := make(chan string, 1)
	go func() {
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := WriteBytes(fifo, []byte("a,b\n1,2\n")); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "a,b\n1,2\n" {
		t.Errorf("reader got %q", s)
	}
	if fi, err := os.Lstat(fifo); err != nil || fi.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("after the write: %v %v, want still a FIFO", fi.Mode(), err)
	}
}

// TestWriteFailureKeepsOld: when the content cannot be produced, a regular
// file keeps its old content and no temporary file is left.
func TestWriteFailureKeepsOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.csv")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := Write(p, func(w io.Writer) error {
		_, _ = io.WriteString(w, "partial")
		return io.ErrShortWrite
	})
	if !errors.Is(err, io.ErrShortWrite) {
		t.Fatalf("Write = %v, want the writer's error", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Errorf("file holds %q, want the old content", b)
	}
	if names := listDir(t, dir); !slices.Equal(names, []string{"r.csv"}) {
		t.Errorf("directory holds %v, want only r.csv", names)
	}
}
