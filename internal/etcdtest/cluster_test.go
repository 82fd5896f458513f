package etcdtest

import (
	"context"
	"testing"
	"time"
)

// A three-member cluster elects a leader, keeps serving through the loss of
// that leader (another is elected), and the lost member comes back with the
// writes it missed.
func TestClusterLeaderLoss(t *testing.T) {
	c := StartCluster(t, 3)
	cl := c.Client()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()

	leader, err := c.WaitLeader(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Put(ctx, "/registry/k", "v1"); err != nil {
		t.Fatal(err)
	}

	c.Members[leader].Kill()
	if c.Members[leader].Running() || c.Members[leader].IsLeader() {
		t.Fatalf("member %d still running after Kill", leader)
	}
	next, err := c.WaitLeader(15 * time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if next == leader {
		t.Fatalf("the killed member %d is the leader", leader)
	}
	put, err := cl.Put(ctx, "/registry/k", "v2")
	if err != nil {
		t.Fatalf("write without the old leader: %v", err)
	}

	c.Members[leader].Restart()
	// The restarted member alone answers once it has caught up.
	mc := c.Members[leader].Client()
	got, err := mc.Get(ctx, "/registry/k")
	if err != nil {
		t.Fatalf("get from the restarted member: %v", err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v2" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("restarted member has %v, want v2 at revision %d", got.Kvs, put.Header.Revision)
	}
	if _, err := c.WaitLeader(15 * time.Second); err != nil {
		t.Fatal(err)
	}
	c.Members[leader].Kill()
	c.Members[leader].Kill() // twice is fine
}
