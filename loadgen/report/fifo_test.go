//go:build unix

package report

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func mkfifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "out.fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("no FIFOs here: %v", err)
	}
	return p
}

// TestFIFONoReader: a FIFO nobody opens fails after the reader wait, not
// never; a link to it alike.
func TestFIFONoReader(t *testing.T) {
	fifo := mkfifo(t)
	link := filepath.Join(filepath.Dir(fifo), "link")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{fifo, link} {
		start := time.Now()
		err := writeFIFOWait(p, func(w io.Writer) error { _, err := io.WriteString(w, "x"); return err }, 300*time.Millisecond, time.Second)
		took := time.Since(start)
		if err == nil || !strings.Contains(err.Error(), "is a FIFO that no reader opened within 300ms") {
			t.Errorf("%s: err = %v, want no reader", p, err)
		}
		// The wait is causal (sleeps only overrun); the upper bound only
		// tells giving up from waiting on, however loaded the machine.
		if took < 300*time.Millisecond || took > 20*time.Second {
			t.Errorf("%s: gave up after %v, want about 300ms", p, took)
		}
	}
	if ReaderWait > 10*time.Second {
		t.Errorf("ReaderWait %v: a FIFO without a reader must fail within seconds", ReaderWait)
	}
}

// TestFIFOLateReader: a reader that opens the FIFO while Write waits gets
// the whole content.
func TestFIFOLateReader(t *testing.T) {
	fifo := mkfifo(t)
	content := strings.Repeat("0123456789abcdef", 16<<10) // 256 KiB: more than a pipe holds
	got := make(chan string, 1)
	go func() {
		time.Sleep(200 * time.Millisecond) // not a wait: the reader comes late on purpose
		f, err := os.Open(fifo)
		if err != nil {
			got <- err.Error()
			return
		}
		b, _ := io.ReadAll(f)
		f.Close()
		got <- string(b)
	}()
	if err := writeFIFOWait(fifo, func(w io.Writer) error { _, err := io.WriteString(w, content); return err }, 5*time.Second, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != content {
		t.Errorf("reader got %d bytes, want %d", len(s), len(content))
	}
}

// TestFIFOStalledReader: a reader that opens the FIFO and reads nothing
// fails the write after the stall timeout once the pipe is full.
func TestFIFOStalledReader(t *testing.T) {
	fifo := mkfifo(t)
	opened := make(chan *os.File, 1)
	go func() {
		f, err := os.OpenFile(fifo, os.O_RDONLY, 0)
		if err != nil {
			opened <- nil
			return
		}
		opened <- f
	}()
	start := time.Now()
	err := writeFIFOWait(fifo, func(w io.Writer) error {
		_, err := io.WriteString(w, strings.Repeat("x", 1<<20))
		return err
	}, 5*time.Second, 300*time.Millisecond)
	took := time.Since(start)
	if r := <-opened; r != nil {
		r.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "the reader took nothing for 300ms") {
		t.Errorf("err = %v, want the stall", err)
	}
	if took > 20*time.Second { // only tells giving up from waiting on
		t.Errorf("gave up after %v, want about 300ms", took)
	}
}
