// Package weirgo tests weir with franz-go (kgo and kadm), the Go client most
// Go services use, against a real node started from the release binary.
//
// TestMain starts one node for the whole package: every test makes its own
// topics and groups with random names, so tests do not see each other's data
// and one node (a few hundred milliseconds to start) serves them all.
package weirgo

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// node is the weir process the tests talk to.
type node struct {
	cmd     *exec.Cmd
	dataDir string
	kafka   string // host:port of the Kafka listener
	http    string // host:port of the HTTP listener
	logMu   sync.Mutex
	log     strings.Builder // everything the node wrote to stderr
	exited  chan struct{}   // closed when the process has ended
}

var weir *node

func TestMain(m *testing.M) {
	n, err := startNode()
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting weir:", err)
		os.Exit(1)
	}
	weir = n
	code := m.Run()
	if err := n.stop(); err != nil {
		fmt.Fprintln(os.Stderr, "stopping weir:", err)
		if code == 0 {
			code = 1
		}
	}
	// A failing run prints the node's log: the client's error alone rarely
	// says which side was wrong.
	if code != 0 || os.Getenv("WEIR_LOG") != "" {
		fmt.Fprintf(os.Stderr, "---- weir log ----\n%s---- end of weir log ----\n", n.logText())
	}
	os.Exit(code)
}

// weirBin is the binary named by WEIR_BIN, else the release build of this
// checkout (tests/go is two levels below the workspace root).
func weirBin() (string, error) {
	bin := os.Getenv("WEIR_BIN")
	if bin == "" {
		bin = filepath.Join("..", "..", "target", "release", "weir")
	}
	abs, err := filepath.Abs(bin)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(abs); err != nil {
		return "", fmt.Errorf("weir binary %s: %w (build it with cargo build --release, or set WEIR_BIN)", abs, err)
	}
	return abs, nil
}

// freePort finds a port free on 127.0.0.1 for a node to listen on. It is
// drawn below the kernel's range for the ports of outgoing connections: a
// port from that range (what binding to port 0 answers) can be taken
// meanwhile by a connection leaving from the same address, such as a
// cluster node's own calls to the others, and the node could not listen
// there. No port is handed out twice in one test run, so the ports of one
// cluster never meet.
func freePort() (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	firstOutgoing := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil && v > 11000 {
				firstOutgoing = v
			}
		}
	}
	for tries := 0; tries < 1000; tries++ {
		port := 10000 + mrand.Intn(firstOutgoing-10000)
		if portsGiven[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err != nil {
			continue
		}
		l.Close()
		portsGiven[port] = true
		return port, nil
	}
	return 0, errors.New("no free port found below the outgoing range in 1000 tries")
}

var (
	portsMu    sync.Mutex
	portsGiven = map[int]bool{}
)

func startNode() (*node, error) {
	bin, err := weirBin()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		n, err := startNodeOnce(bin, "2")
		if err == nil {
			return n, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// startNodeOnce starts a node with `cores` shards and the flags `extra`.
func startNodeOnce(bin string, cores string, extra ...string) (*node, error) {
	kport, err := freePort()
	if err != nil {
		return nil, err
	}
	hport, err := freePort()
	if err != nil {
		return nil, err
	}
	// A fresh data directory for every run, under $TMPDIR (the data
	// directory must not be on tmpfs: set TMPDIR elsewhere where /tmp is).
	dir, err := os.MkdirTemp("", "weir-go-test-")
	if err != nil {
		return nil, err
	}
	n := &node{
		dataDir: dir,
		kafka:   fmt.Sprintf("127.0.0.1:%d", kport),
		http:    fmt.Sprintf("127.0.0.1:%d", hport),
		exited:  make(chan struct{}),
	}
	args := []string{"serve", dir,
		"--kafka", n.kafka,
		"--addr", n.http,
		"--cores", cores,
		// Kafka's default waits 3 s before a new group's first
		// rebalance; the group tests would only wait longer.
		"--group-initial-rebalance-delay-ms", "0",
	}
	n.cmd = exec.Command(bin, append(args, extra...)...)
	n.cmd.Stdout = io.Discard
	// If the test binary dies without stopping the node (a -timeout
	// panic, a kill), the kernel kills the node too.
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := n.cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	if err := n.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	serving := make(chan struct{})
	go func() {
		// Keep reading stderr for the whole run so the node never
		// blocks on a full pipe, and keep it for a failing run.
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			n.logMu.Lock()
			n.log.WriteString(line + "\n")
			n.logMu.Unlock()
			if strings.Contains(line, "weir serving") {
				once.Do(func() { close(serving) })
			}
		}
	}()
	go func() {
		n.cmd.Wait()
		close(n.exited)
	}()
	select {
	case <-serving:
		return n, nil
	case <-n.exited:
		os.RemoveAll(dir)
		return nil, fmt.Errorf("weir exited before serving: %s\n%s", n.cmd.ProcessState, n.logText())
	case <-time.After(60 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
		os.RemoveAll(dir)
		return nil, fmt.Errorf("weir did not log \"weir serving\" within 60 s:\n%s", n.logText())
	}
}

func (n *node) logText() string {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	return n.log.String()
}

// stop ends the node with SIGTERM (a clean stop), SIGKILL if it takes longer
// than 20 s, and removes its data directory.
func (n *node) stop() error {
	defer os.RemoveAll(n.dataDir)
	n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(20 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
		return errors.New("weir did not stop within 20 s of SIGTERM; killed")
	}
	return nil
}

// ---- helpers shared by the tests ----

// newClient makes a kgo client for the node with the test's options.
func newClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts = append([]kgo.Opt{kgo.SeedBrokers(weir.kafka)}, opts...)
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		t.Fatalf("kgo.NewClient: %v", err)
	}
	t.Cleanup(cl.Close)
	return cl
}

func newAdmin(t *testing.T) *kadm.Client {
	t.Helper()
	return kadm.NewClient(newClient(t))
}

// name is a fresh topic or group name: tests share one node.
func name(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// createTopic makes a topic and fails the test unless it was made.
func createTopic(t *testing.T, adm *kadm.Client, partitions int32, configs map[string]*string) string {
	t.Helper()
	topic := name(strings.ReplaceAll(t.Name(), "/", "-"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	resp, err := adm.CreateTopic(ctx, partitions, 1, configs, topic)
	if err != nil {
		t.Fatalf("CreateTopic %s: %v", topic, err)
	}
	if resp.Err != nil {
		t.Fatalf("CreateTopic %s: %v (%s)", topic, resp.Err, resp.ErrMessage)
	}
	return topic
}

// eventually calls cond until it returns nil or the deadline passes: the
// tests wait for events (a rebalance, a commit becoming visible) this way,
// never with a bare sleep.
func eventually(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v: %v", what, within, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ctxFor is a context that ends the test's waiting after d.
func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// consumeN polls cl until it has n records or ctx ends, failing the test on a
// fetch error or a timeout.
func consumeN(t *testing.T, ctx context.Context, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var out []*kgo.Record
	for len(out) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(out), n)
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Fatalf("fetch %s[%d]: %v", topic, p, err)
		})
		out = append(out, fs.Records()...)
	}
	return out
}
