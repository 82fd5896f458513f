package main

import (
	"context"
	"fmt"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	apisharding "k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/watchkeeper/watchkeeper/e2e/internal/kubecluster"
)

// checkSharded lists and watches secrets with Kubernetes 1.38's shard
// selectors (ShardedListAndWatch, on by default) on both servers: each of
// two shards of the UID hash space gets exactly the secrets whose UID
// hashes into it, in its list (which names its shard in shardInfo) and in
// its watch from the list's RV.
func checkSharded(ctx context.Context, wk, up *kubecluster.Server) (string, error) {
	const before, after = 10, 10
	shards := []string{
		"shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')",
		"shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')",
	}
	shardOf := func(uid string) int {
		h, _ := strconv.ParseUint(apisharding.HashField(uid), 16, 64)
		return int(h >> 63)
	}
	var summary string
	for _, s := range []*kubecluster.Server{wk, up} {
		ns := "sharded-" + s.Name
		if _, err := s.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return "", err
		}
		secrets := s.Client.CoreV1().Secrets(ns)
		shardOfName := map[string]int{}
		create := func(name string) error {
			sec, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err == nil {
				shardOfName[name] = shardOf(string(sec.UID))
			}
			return err
		}
		for i := range before {
			if err := create(fmt.Sprintf("before-%d", i)); err != nil {
				return "", err
			}
		}
		seen := make([]map[string]bool, len(shards))
		watches := make([]watch.Interface, len(shards))
		for i, sel := range shards {
			list, err := secrets.List(ctx, metav1.ListOptions{ResourceVersion: "0", ShardSelector: sel})
			if err != nil {
				return "", fmt.Errorf("%s: shard %d list: %w", s.Name, i, err)
			}
			if list.ShardInfo == nil || list.ShardInfo.Selector != sel {
				return "", fmt.Errorf("%s: shard %d list's shardInfo %+v, want its selector", s.Name, i, list.ShardInfo)
			}
			seen[i] = map[string]bool{}
			for _, sec := range list.Items {
				seen[i][sec.Name] = true
			}
			if watches[i], err = secrets.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion, ShardSelector: sel}); err != nil {
				return "", fmt.Errorf("%s: shard %d watch: %w", s.Name, i, err)
			}
			defer watches[i].Stop()
		}
		for i := range after {
			if err := create(fmt.Sprintf("after-%d", i)); err != nil {
				return "", err
			}
		}
		for i, w := range watches {
			want := 0
			for name, shard := range shardOfName {
				if shard == i && name[:5] == "after" {
					want++
				}
			}
			for got := 0; got < want; got++ {
				select {
				case ev := <-w.ResultChan():
					m, err := metaOf(ev)
					if err != nil {
						return "", err
					}
					if ev.Type != watch.Added {
						return "", fmt.Errorf("%s: shard %d: %s %s, want ADDED", s.Name, i, ev.Type, m.GetName())
					}
					seen[i][m.GetName()] = true
				case <-time.After(30 * time.Second):
					return "", fmt.Errorf("%s: shard %d: %d of its %d new secrets within 30s", s.Name, i, got, want)
				}
			}
		}
		counts := make([]int, len(shards))
		for name, shard := range shardOfName {
			for i := range shards {
				if seen[i][name] != (i == shard) {
					return "", fmt.Errorf("%s: %s (shard %d) in shard %d's list or watch: %v", s.Name, name, shard, i, seen[i][name])
				}
			}
			counts[shard]++
		}
		summary += fmt.Sprintf("%s: %d and %d secrets, each in its shard's list and watch only; ", s.Name, counts[0], counts[1])
	}
	return summary[:len(summary)-2], nil
}
