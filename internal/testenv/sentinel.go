package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// groupTimeout bounds the multi-step waits of sentinel and cluster setup:
// sentinels discover each other through hello messages every 2 s.
const groupTimeout = 30 * time.Second

// SentinelGroup is one primary, one replica and three sentinels monitoring
// them under MasterName. Primary always names the current master: Failover
// swaps Primary and Replica.
type SentinelGroup struct {
	MasterName string
	Primary    *Redis
	Replica    *Redis
	Sentinels  []string // host:port
	// SentinelPassword is required by the sentinels when set in the options.
	SentinelPassword string

	procs []*Process
	logs  []string
}

// StartSentinelGroup starts the group and returns once every sentinel agrees
// on the master, sees the replica and knows the two other sentinels. The data
// nodes use o's credentials (Password, or User+Password); TLS and Unix are not
// supported for groups.
func StartSentinelGroup(t TB, o RedisOptions) *SentinelGroup {
	t.Helper()
	if o.TLS || o.Unix {
		t.Fatalf("testenv: StartSentinelGroup supports neither TLS nor Unix options")
		return nil
	}
	sentinelBin, ok := lookBinary(t, "redis-sentinel", "redis-sentinel")
	if !ok {
		return nil
	}
	g := &SentinelGroup{MasterName: "sluicemaster", SentinelPassword: o.SentinelPassword}
	// Both data nodes carry masterauth: after a failover the old primary
	// replicates from the old replica.
	// No diskless-sync delay: the default waits 5 s for more replicas before
	// every full sync, which would dominate setup and failover time.
	dataArgs := append([]string{"--repl-diskless-sync-delay", "0"}, o.Args...)
	if o.Password != "" {
		dataArgs = append(dataArgs, "--masterauth", o.Password)
		if o.User != "" {
			dataArgs = append(dataArgs, "--masteruser", o.User)
		}
	}
	po := o
	po.Args = dataArgs
	g.Primary = StartRedis(t, po)
	if g.Primary == nil {
		return nil
	}
	ro := po
	ro.Args = append(append([]string{}, dataArgs...), "--replicaof", "127.0.0.1", strconv.Itoa(g.Primary.port))
	g.Replica = StartRedis(t, ro)
	if g.Replica == nil {
		return nil
	}
	if err := waitReplicaLinked(g.Replica, g.Primary); err != nil {
		t.Fatalf("testenv: sentinel group: %v\nreplica log:\n%s", err, g.Replica.Log())
		return nil
	}

	t.Cleanup(func() {
		for _, p := range g.procs {
			p.Kill()
		}
	})
	for i := 0; i < 3; i++ {
		addr, err := g.startSentinel(t, sentinelBin, i, o)
		if err != nil {
			t.Fatalf("testenv: start sentinel %d: %v\nlog tail:\n%s", i, err, logTail(g.logs[len(g.logs)-1], 40))
			return nil
		}
		g.Sentinels = append(g.Sentinels, addr)
	}
	if err := pollUntil(groupTimeout, 100*time.Millisecond, func() error { return g.agree(g.Primary.Addr) }); err != nil {
		t.Fatalf("testenv: sentinels did not settle: %v\n%s", err, g.logTails())
		return nil
	}
	return g
}

func (g *SentinelGroup) startSentinel(t TB, bin string, i int, o RedisOptions) (string, error) {
	dir := filepath.Join(t.TempDir(), fmt.Sprintf("sentinel%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("mkdir: %w", err)
	}
	log := filepath.Join(dir, "sentinel.log")
	g.logs = append(g.logs, log)
	var err error
	for attempt := 0; attempt < startAttempts; attempt++ {
		var port int
		if port, err = freePort(); err != nil {
			return "", err
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		conf := []string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"dir " + dir,
			"daemonize no",
			"protected-mode no",
			`logfile ""`,
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 2", g.MasterName, g.Primary.port),
			// Short timers keep failover tests within seconds.
			fmt.Sprintf("sentinel down-after-milliseconds %s 1000", g.MasterName),
			fmt.Sprintf("sentinel failover-timeout %s 5000", g.MasterName),
			fmt.Sprintf("sentinel parallel-syncs %s 1", g.MasterName),
		}
		if o.Password != "" {
			conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", g.MasterName, o.Password))
			if o.User != "" {
				conf = append(conf, fmt.Sprintf("sentinel auth-user %s %s", g.MasterName, o.User))
			}
		}
		if o.SentinelPassword != "" {
			conf = append(conf, "requirepass "+o.SentinelPassword, "sentinel sentinel-pass "+o.SentinelPassword)
		}
		// Sentinel rewrites its config file, so it must be writable and fresh.
		confPath := filepath.Join(dir, "sentinel.conf")
		if err = os.WriteFile(confPath, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			return "", fmt.Errorf("write sentinel.conf: %w", err)
		}
		var p *Process
		p, err = StartProcess(ProcessSpec{Name: "redis-sentinel", Bin: bin, Args: []string{confPath}, Dir: dir, LogPath: log})
		if err != nil {
			return "", err
		}
		if err = waitReady(p, func(ctx context.Context) error { return respPing(ctx, "tcp", addr) }); err == nil {
			g.procs = append(g.procs, p)
			return addr, nil
		}
		p.Kill()
		if !errors.Is(err, ErrExited) {
			break
		}
	}
	return "", err
}

func (g *SentinelGroup) sentinelClient(addr string) *goredis.SentinelClient {
	return goredis.NewSentinelClient(&goredis.Options{
		Addr: addr, Password: g.SentinelPassword,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second,
		MaxRetries: -1, PoolSize: 1, DisableIdentity: true,
	})
}

// agree checks that every sentinel names master as the master, sees one
// healthy replica and knows both other sentinels.
func (g *SentinelGroup) agree(master string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range g.Sentinels {
		sc := g.sentinelClient(s)
		err := func() error {
			defer sc.Close()
			addr, err := sc.GetMasterAddrByName(ctx, g.MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: get-master-addr-by-name: %w", s, err)
			}
			if got := net.JoinHostPort(addr[0], addr[1]); got != master {
				return fmt.Errorf("sentinel %s: master is %s, want %s", s, got, master)
			}
			m, err := sc.Master(ctx, g.MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: master: %w", s, err)
			}
			if m["flags"] != "master" || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return fmt.Errorf("sentinel %s: flags=%s num-slaves=%s num-other-sentinels=%s", s, m["flags"], m["num-slaves"], m["num-other-sentinels"])
			}
			reps, err := sc.Replicas(ctx, g.MasterName).Result()
			if err != nil {
				return fmt.Errorf("sentinel %s: replicas: %w", s, err)
			}
			for _, r := range reps {
				if r["flags"] != "slave" || r["master-link-status"] != "ok" {
					return fmt.Errorf("sentinel %s: replica %s:%s flags=%s link=%s", s, r["ip"], r["port"], r["flags"], r["master-link-status"])
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// Failover runs SENTINEL FAILOVER, waits until every sentinel reports the
// replica as the new master, and swaps Primary and Replica. It also points
// the old primary at the new one itself, as sentinel would do on its next
// 10 s INFO round, and waits until that link is up, so the group is whole
// again when Failover returns.
func (g *SentinelGroup) Failover(t TB) {
	t.Helper()
	sc := g.sentinelClient(g.Sentinels[0])
	defer sc.Close()
	// A sentinel refuses while its view of the replica is stale
	// (NOGOODSLAVE) or a failover is still running (INPROG); both pass.
	err := pollUntil(groupTimeout, 200*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		return sc.Failover(ctx, g.MasterName).Err()
	})
	if err != nil {
		t.Fatalf("testenv: SENTINEL FAILOVER: %v\n%s", err, g.logTails())
		return
	}
	g.Primary, g.Replica = g.Replica, g.Primary
	if err := pollUntil(groupTimeout, 50*time.Millisecond, g.reportMaster); err != nil {
		t.Fatalf("testenv: sentinels did not switch master: %v\n%s", err, g.logTails())
		return
	}
	c := adminClient(g.Replica.Addr, g.Replica.User, g.Replica.Password)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.ReplicaOf(ctx, "127.0.0.1", strconv.Itoa(g.Primary.port)).Err(); err != nil {
		t.Fatalf("testenv: REPLICAOF on the old primary: %v", err)
		return
	}
	if err := waitReplicaLinked(g.Replica, g.Primary); err != nil {
		t.Fatalf("testenv: old primary did not follow the new one: %v\n%s", err, g.Replica.Log())
	}
}

// reportMaster checks that every sentinel names g.Primary as the master and
// that it has taken the role.
func (g *SentinelGroup) reportMaster() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range g.Sentinels {
		sc := g.sentinelClient(s)
		addr, err := sc.GetMasterAddrByName(ctx, g.MasterName).Result()
		sc.Close()
		if err != nil {
			return fmt.Errorf("sentinel %s: get-master-addr-by-name: %w", s, err)
		}
		if got := net.JoinHostPort(addr[0], addr[1]); got != g.Primary.Addr {
			return fmt.Errorf("sentinel %s: master is %s, want %s", s, got, g.Primary.Addr)
		}
	}
	c := adminClient(g.Primary.Addr, g.Primary.User, g.Primary.Password)
	defer c.Close()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("new primary %s: INFO: %w", g.Primary.Addr, err)
	}
	if role := infoField(info, "role"); role != "master" {
		return fmt.Errorf("new primary %s has role %s", g.Primary.Addr, role)
	}
	return nil
}

// waitReplicaLinked waits until replica reports an up link to primary.
func waitReplicaLinked(replica, primary *Redis) error {
	return pollUntil(readyTimeout, 50*time.Millisecond, func() error { return replicaLinked(replica, primary) })
}

func replicaLinked(replica, primary *Redis) error {
	c := adminClient(replica.Addr, replica.User, replica.Password)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("replica %s: INFO: %w", replica.Addr, err)
	}
	if infoField(info, "role") != "slave" || infoField(info, "master_port") != strconv.Itoa(primary.port) ||
		infoField(info, "master_link_status") != "up" {
		return fmt.Errorf("replica %s not linked to %s: role=%s master_port=%s link=%s", replica.Addr, primary.Addr,
			infoField(info, "role"), infoField(info, "master_port"), infoField(info, "master_link_status"))
	}
	return nil
}

func (g *SentinelGroup) logTails() string {
	var b strings.Builder
	for i, l := range g.logs {
		fmt.Fprintf(&b, "sentinel %d log tail:\n%s\n", i, logTail(l, 15))
	}
	return b.String()
}
