package report

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// kind is how Write treats a path.
type kind int

const (
	atomic  kind = iota // new or regular file: temporary file + rename
	inPlace             // symlink, character device, FIFO: opened and written
)

// classify says how path is written, or why it cannot be.
func classify(path string) (kind, fs.FileInfo, error) {
	if path == "" {
		return 0, nil, errors.New("empty path")
	}
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return atomic, nil, nil
	}
	if err != nil {
		return 0, nil, err
	}
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return atomic, fi, nil
	case m&fs.ModeSymlink != 0:
		target, err := os.Stat(path)
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil, fmt.Errorf("%s is a symbolic link to a missing file", path)
		}
		if err != nil {
			return 0, nil, err
		}
		if _, _, err := classifyTarget(path, target.Mode()); err != nil {
			return 0, nil, err
		}
		return inPlace, target, nil
	default:
		return classifyTarget(path, m)
	}
}

// classifyTarget accepts what a write can go to in place: a regular file
// (through a link), a character device or a FIFO.
func classifyTarget(path string, m fs.FileMode) (kind, fs.FileInfo, error) {
	switch {
	case m.IsRegular(), m&fs.ModeCharDevice != 0, m&fs.ModeNamedPipe != 0:
		return inPlace, nil, nil
	case m.IsDir():
		return 0, nil, fmt.Errorf("%s is a directory", path)
	case m&fs.ModeSocket != 0:
		return 0, nil, fmt.Errorf("%s is a socket", path)
	case m&fs.ModeDevice != 0:
		return 0, nil, fmt.Errorf("%s is a block device", path)
	default:
		return 0, nil, fmt.Errorf("%s is not a file (mode %s)", path, m)
	}
}

// Check reports whether Write can write path, without changing it: a new
// or regular file needs a writable directory (one temporary file is
// created there and removed); a symlink, a character device or a FIFO is
// accepted as is (it is opened only when written); anything else is
// refused.
func Check(path string) error {
	k, _, err := classify(path)
	if err != nil {
		return err
	}
	if k == inPlace {
		return nil
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".gpulens-check-*")
	if err != nil {
		return dirError(dir, err)
	}
	name := tmp.Name()
	err = tmp.Close()
	if rerr := os.Remove(name); err == nil {
		err = rerr
	}
	return err
}

// dirError explains why a file could not be created in dir.
func dirError(dir string, err error) error {
	di, serr := os.Stat(dir)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		return fmt.Errorf("directory %s does not exist", dir)
	case serr == nil && !di.IsDir():
		return fmt.Errorf("%s is not a directory", dir)
	}
	return fmt.Errorf("cannot create a file in %s: %w", dir, err)
}

// Write writes what write produces to path: atomically when path is new or
// a regular file (whose permissions are kept; a new file gets 0644), in
// place when it is a symlink, a character device or a FIFO.
//
// A FIFO (or a link to one) is opened without blocking: when no reader
// opens it within ReaderWait, or its reader takes nothing for
// StallTimeout, Write fails.
func Write(path string, write func(w io.Writer) error) error {
	return writeFIFOWait(path, write, ReaderWait, StallTimeout)
}

// writeFIFOWait is Write with the FIFO's reader wait and stall timeout.
func writeFIFOWait(path string, write func(w io.Writer) error, wait, stall time.Duration) error {
	k, fi, err := classify(path)
	if err != nil {
		return err
	}
	if k == inPlace {
		if t, err := os.Stat(path); err == nil && t.Mode()&fs.ModeNamedPipe != 0 {
			f, err := openFIFO(path, wait)
			if err != nil {
				return err
			}
			return finishTo(f, deadlineWriter{f, stall}, write, nil)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
		if err != nil {
			return err
		}
		return finish(f, write, nil)
	}
	perm := fs.FileMode(0o644)
	if fi != nil {
		perm = fi.Mode().Perm()
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return dirError(filepath.Dir(path), err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	return finish(tmp, write, func() error {
		if err := os.Chmod(tmp.Name(), perm); err != nil {
			return err
		}
		return os.Rename(tmp.Name(), path)
	})
}

// finish writes through a buffer, closes f and then runs commit.
func finish(f *os.File, write func(io.Writer) error, commit func() error) error {
	return finishTo(f, f, write, commit)
}

// finishTo is finish writing through w (f or a wrapper of it).
func finishTo(f *os.File, w io.Writer, write func(io.Writer) error, commit func() error) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	err := write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && commit != nil {
		err = commit()
	}
	return err
}

// WriteBytes writes b to path as Write does.
func WriteBytes(path string, b []byte) error {
	return Write(path, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
