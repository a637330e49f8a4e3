package testenv

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis cluster of primaries only (no replicas), all slots
// assigned and cluster_state:ok on every node.
type RedisCluster struct {
	Addrs []string
	Nodes []*Redis
}

// StartRedisCluster starts primaries (at least 3) cluster-enabled nodes and
// joins them with `redis-cli --cluster create`.
func StartRedisCluster(t TB, primaries int) *RedisCluster {
	t.Helper()
	if primaries < 3 {
		t.Fatalf("testenv: a Redis cluster needs at least 3 primaries, got %d", primaries)
		return nil
	}
	cli, ok := lookBinary(t, "redis-cli", "redis-tools")
	if !ok {
		return nil
	}
	c := &RedisCluster{}
	for range primaries {
		r := startRedis(t, redisConfig{cluster: true})
		if r == nil {
			return nil
		}
		c.Nodes = append(c.Nodes, r)
		c.Addrs = append(c.Addrs, r.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), groupTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testenv: redis-cli --cluster create: %v\n%s", err, out)
		return nil
	}
	if err := pollUntil(groupTimeout, 50*time.Millisecond, c.ready); err != nil {
		t.Fatalf("testenv: cluster not ready: %v\nredis-cli output:\n%s", err, out)
		return nil
	}
	return c
}

// ready checks that every node sees all slots, all nodes and state ok.
func (c *RedisCluster) ready() error {
	for _, n := range c.Nodes {
		if err := func() error {
			a := adminClient(n.Addr, "", "")
			defer a.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil {
				return fmt.Errorf("node %s: CLUSTER INFO: %w", n.Addr, err)
			}
			if infoField(info, "cluster_state") != "ok" ||
				infoField(info, "cluster_slots_ok") != "16384" ||
				infoField(info, "cluster_known_nodes") != strconv.Itoa(len(c.Nodes)) {
				return fmt.Errorf("node %s: state=%s slots_ok=%s known_nodes=%s", n.Addr,
					infoField(info, "cluster_state"), infoField(info, "cluster_slots_ok"), infoField(info, "cluster_known_nodes"))
			}
			return nil
		}(); err != nil {
			return err
		}
	}
	return nil
}

// Client returns a go-redis cluster client for assertions, closed in Cleanup.
func (c *RedisCluster) Client(t TB) *goredis.ClusterClient {
	t.Helper()
	cc := goredis.NewClusterClient(&goredis.ClusterOptions{
		Addrs: c.Addrs, DialTimeout: 2 * time.Second, DisableIdentity: true,
	})
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}
