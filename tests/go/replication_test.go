package weirgo

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestClusterReplicatedFailover: franz-go (idempotent, acks=all, its
// defaults) produces to a topic of three replicas on three nodes while
// the leader of partition 0 is killed with SIGKILL. Metadata names each
// partition's three replicas and ISR, the leader moves to another
// in-sync replica, and every record acknowledged is read back exactly
// once at the offset it was acknowledged at.
func TestClusterReplicatedFailover(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := ctxFor(t, 120*time.Second)
	adm := kadm.NewClient(clientOf(t, nodes[0]))
	topic := name("replicated")
	if _, err := adm.CreateTopic(ctx, 3, 3, nil, topic); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	var leader0 int32
	eventually(t, 30*time.Second, "three replicas in sync everywhere", func() error {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		for _, p := range td[topic].Partitions {
			if len(p.Replicas) != 3 || len(p.ISR) != 3 || p.Leader < 1 {
				return fmt.Errorf("partition %d: leader %d, replicas %v, isr %v", p.Partition, p.Leader, p.Replicas, p.ISR)
			}
			if p.Partition == 0 {
				leader0 = p.Leader
			}
		}
		return nil
	})

	seeds := []string{nodes[0].kafka, nodes[1].kafka, nodes[2].kafka}
	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	type at struct {
		partition int32
		offset    int64
	}
	var mu sync.Mutex
	acked := map[string]at{}
	var failed []error
	produce := func(from, to int) {
		var wg sync.WaitGroup
		for i := from; i < to; i++ {
			wg.Add(1)
			v := fmt.Sprintf("franz-%d", i)
			prod.Produce(ctx, &kgo.Record{Value: []byte(v)}, func(r *kgo.Record, err error) {
				defer wg.Done()
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					failed = append(failed, err)
					return
				}
				acked[v] = at{r.Partition, r.Offset}
			})
		}
		wg.Wait()
	}
	produce(0, 300)
	victim := nodes[leader0-1]
	victim.cmd.Process.Kill()
	<-victim.exited
	killed := time.Now()
	// Produced meanwhile: franz-go retries until a new leader takes them.
	produce(300, 600)
	t.Logf("600 records acknowledged %.2f s after the kill of partition 0's leader", time.Since(killed).Seconds())
	if len(failed) > 0 {
		t.Fatalf("%d produces failed, e.g. %v", len(failed), failed[0])
	}

	rest := []*node{}
	for i, n := range nodes {
		if int32(i+1) != leader0 {
			rest = append(rest, n)
		}
	}
	admRest := kadm.NewClient(clientOf(t, rest[0]))
	td, err := admRest.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range td[topic].Partitions {
		if p.Partition == 0 && (p.Leader == leader0 || p.Leader < 1) {
			t.Fatalf("partition 0 is still led by %d", p.Leader)
		}
	}
	cons, err := kgo.NewClient(kgo.SeedBrokers(rest[0].kafka, rest[1].kafka), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	got := map[string]at{}
	readCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for len(got) < len(acked) && readCtx.Err() == nil {
		fs := cons.PollFetches(readCtx)
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value)
			if prev, dup := got[v]; dup {
				t.Errorf("%s read twice: at %v and %d/%d", v, prev, r.Partition, r.Offset)
			}
			got[v] = at{r.Partition, r.Offset}
		})
	}
	for v, want := range acked {
		if have, ok := got[v]; !ok {
			t.Errorf("acknowledged %s at %v: lost", v, want)
		} else if have != want {
			t.Errorf("acknowledged %s at %v, read at %v", v, want, have)
		}
	}
}
