package storagebench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// rvMover writes a key outside the watched resource every interval, so
// etcd's revision, and with progress notifications the caches'
// resourceVersion, keeps moving while the resource itself stays idle.
// Upstream sends no bookmark while its resourceVersion stands still, so
// without this it would deliver none and there would be nothing to compare.
type rvMover struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	client *clientv3.Client
}

func startRVMover(env Env, interval time.Duration) (*rvMover, error) {
	client, err := newEtcdClient(env)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &rvMover{cancel: cancel, client: client}
	key := env.Prefix + "/unrelated/tick"
	m.wg.Go(func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		for i := 0; ; i++ {
			if _, err := client.Put(ctx, key, strconv.Itoa(i)); err != nil && ctx.Err() == nil {
				// A missed tick only delays the revision; keep going.
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return m, nil
}

func (m *rvMover) stop() {
	m.cancel()
	m.wg.Wait()
	_ = m.client.Close()
}

// newEtcdClient is a plain etcd client of env's etcd, for writes that
// bypass the storage under test.
func newEtcdClient(env Env) (*clientv3.Client, error) {
	client, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{env.EtcdEndpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	return client, nil
}
