package demo

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// proc is one OS process the demo started, logging to its own file.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error // set before done closes
}

// supervisor starts the demo's processes, each in a process group of its own
// (so that a process's children go with it and a Ctrl-C on the terminal
// reaches the demo first, which then stops them in order), and stops every one
// of them on the way out.
type supervisor struct {
	logDir string
	mu     sync.Mutex
	procs  []*proc
	// died receives processes that exit while the demo still needs them.
	died     chan *proc
	stopping bool
}

func newSupervisor(logDir string) *supervisor {
	return &supervisor{logDir: logDir, died: make(chan *proc, 32)}
}

// errMissingBinary explains how to build a binary that is not there.
func missingBinary(path string) error {
	how := "make build"
	switch filepath.Base(path) {
	case "localcluster":
		how = "make tools"
	}
	return fmt.Errorf("%s is missing: build it with `%s` (or run `make demo`, which builds everything)", path, how)
}

func (s *supervisor) start(name, binary string, args ...string) (*proc, error) {
	if st, err := os.Stat(binary); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			return nil, missingBinary(binary)
		}
		return nil, err
	}
	logPath := filepath.Join(s.logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "# %s %s\n", binary, strings.Join(args, " "))
	p := &proc{name: name, cmd: exec.Command(binary, args...), log: logPath, done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = f, f
	// Own process group; and if the demo itself is killed outright, the kernel
	// kills the child too (Linux).
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		f.Close()
		return nil, errors.New("demo is stopping")
	}
	if err := p.cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	s.procs = append(s.procs, p)
	go func() {
		p.err = p.cmd.Wait()
		f.Close()
		close(p.done)
		s.mu.Lock()
		stopping := s.stopping
		s.mu.Unlock()
		if !stopping {
			s.died <- p
		}
	}()
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// tail is the end of the process's log, for error messages.
func (p *proc) tail(lines int) string {
	data, err := os.ReadFile(p.log)
	if err != nil {
		return ""
	}
	all := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return string(bytes.Join(all, []byte("\n")))
}

// stopAll stops every process, the last started first: SIGTERM to its
// process group, then SIGKILL after grace. It returns the names of processes
// that had to be killed.
func (s *supervisor) stopAll(grace time.Duration) []string {
	s.mu.Lock()
	s.stopping = true
	procs := append([]*proc(nil), s.procs...)
	s.mu.Unlock()
	var killed []string
	for i := len(procs) - 1; i >= 0; i-- {
		p := procs[i]
		if p.exited() {
			continue
		}
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(grace):
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
			<-p.done
			killed = append(killed, p.name)
		}
		// Anything left in the group (a process's own children) goes too.
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	}
	return killed
}

// freePort asks the kernel for a free TCP port on host.
func freePort(host string) (int, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, fmt.Errorf("finding a free port on %s: %w", host, err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
