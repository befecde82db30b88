package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Output runs bin with args to its end within ctx and returns what it
// wrote to its standard output and error. env ("KEY=value") is added to the
// test's environment. The program runs in its own process group, killed
// whole when ctx ends (a browser's or a go command's children included);
// the error then names ctx's end.
func Output(ctx context.Context, env []string, bin string, args ...string) (stdout, stderr []byte, err error) {
	var out, errOut bytes.Buffer
	err = run(ctx, env, &out, &errOut, bin, args)
	return out.Bytes(), errOut.Bytes(), err
}

// CombinedOutput is Output with the standard output and error in one, in
// the order written.
func CombinedOutput(ctx context.Context, env []string, bin string, args ...string) ([]byte, error) {
	var out bytes.Buffer
	err := run(ctx, env, &out, &out, bin, args) // one writer: exec.Cmd makes one pipe of both
	return out.Bytes(), err
}

func run(ctx context.Context, env []string, stdout, stderr io.Writer, bin string, args []string) error {
	cmd := exec.CommandContext(ctx, bin, args...)
	if env != nil {
		cmd.Env = append(os.Environ(), env...)
	}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	// A child left behind may hold the output pipes open.
	cmd.WaitDelay = 2 * time.Second
	err := cmd.Run()
	if err != nil && ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", bin, strings.Join(args, " "), err)
	}
	return nil
}
