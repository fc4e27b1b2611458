package weirgo

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestGroupCooperativeSticky runs two kgo group members (the classic
// protocol, cooperative-sticky balancer) over a 4-partition topic. The first
// member starts alone and takes all four partitions and half of the records;
// the second joins, the first gives two partitions up (cooperative: without
// a stop-the-world revoke of the rest), and the remaining records are shared.
// Every record must be consumed exactly once by the pair (the first member
// commits what it consumed before it gives a partition up, kgo's default for
// cooperative revokes), the group must settle at two partitions each, and the
// offsets committed must be visible through kadm.
func TestGroupCooperativeSticky(t *testing.T) {
	const partitions = 4
	const perPartition = 50 // per phase
	adm := newAdmin(t)
	topic := createTopic(t, adm, partitions, nil)
	group := name("group")
	ctx := ctxFor(t, 90*time.Second)

	prod := newClient(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	produce := func(phase int) {
		t.Helper()
		var rs []*kgo.Record
		for p := 0; p < partitions; p++ {
			for i := 0; i < perPartition; i++ {
				rs = append(rs, &kgo.Record{Partition: int32(p), Value: []byte(fmt.Sprintf("phase%d-p%d-%d", phase, p, i))})
			}
		}
		if err := prod.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("produce phase %d: %v", phase, err)
		}
	}

	// seen records who consumed each partition/offset; a second sighting
	// is a duplicate delivery.
	type po struct {
		p int32
		o int64
	}
	var mu sync.Mutex
	seen := map[po]string{}
	var dups []string
	assigned := map[string]map[int32]bool{} // member -> partitions it holds now

	member := func(id string) (*kgo.Client, chan struct{}) {
		assigned[id] = map[int32]bool{}
		cl := newClient(t,
			kgo.ConsumerGroup(group),
			kgo.ConsumeTopics(topic),
			kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			// Rebalances wait while a poll's records are handled,
			// so a revoke's commit covers everything handed out.
			kgo.BlockRebalanceOnPoll(),
			kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m[topic] {
					assigned[id][p] = true
				}
			}),
			kgo.OnPartitionsRevoked(func(ctx context.Context, cl *kgo.Client, m map[string][]int32) {
				// What kgo does by default on a revoke when
				// autocommitting, kept explicit here: commit what
				// was consumed before the partitions go.
				if err := cl.CommitMarkedOffsets(ctx); err != nil {
					t.Errorf("%s: commit on revoke: %v", id, err)
				}
				mu.Lock()
				defer mu.Unlock()
				for _, p := range m[topic] {
					delete(assigned[id], p)
				}
			}),
			kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
				t.Errorf("%s lost partitions %v: a session expired", id, m)
			}),
			kgo.AutoCommitMarks(),
		)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for ctx.Err() == nil {
				fs := cl.PollFetches(ctx)
				if errs := fs.Errors(); len(errs) > 0 && ctx.Err() == nil {
					for _, e := range errs {
						if e.Err != context.Canceled && e.Err != kgo.ErrClientClosed {
							t.Errorf("%s: fetch %s[%d]: %v", id, e.Topic, e.Partition, e.Err)
						}
					}
				}
				mu.Lock()
				fs.EachRecord(func(r *kgo.Record) {
					k := po{r.Partition, r.Offset}
					if prev, ok := seen[k]; ok {
						dups = append(dups, fmt.Sprintf("%d/%d by %s and %s", r.Partition, r.Offset, prev, id))
					}
					seen[k] = id
				})
				mu.Unlock()
				cl.MarkCommitRecords(fs.Records()...)
				cl.AllowRebalance()
				if cl.Context().Err() != nil {
					return
				}
			}
		}()
		return cl, done
	}
	countSeen := func() int { mu.Lock(); defer mu.Unlock(); return len(seen) }
	holds := func(id string) int { mu.Lock(); defer mu.Unlock(); return len(assigned[id]) }

	produce(1)
	a, aDone := member("a")
	eventually(t, 30*time.Second, "member a consumes phase 1", func() error {
		if n := countSeen(); n < partitions*perPartition {
			return fmt.Errorf("%d records consumed", n)
		}
		return nil
	})
	if holds("a") != partitions {
		t.Fatalf("member a alone holds %d partitions, want %d", holds("a"), partitions)
	}

	b, bDone := member("b")
	eventually(t, 45*time.Second, "the group settles at two partitions each", func() error {
		if ha, hb := holds("a"), holds("b"); ha != 2 || hb != 2 {
			return fmt.Errorf("a holds %d, b holds %d", ha, hb)
		}
		return nil
	})

	produce(2)
	eventually(t, 30*time.Second, "both members consume phase 2", func() error {
		if n := countSeen(); n < 2*partitions*perPartition {
			return fmt.Errorf("%d records consumed", n)
		}
		return nil
	})

	mu.Lock()
	if len(dups) > 0 {
		t.Errorf("records consumed twice: %v", dups)
	}
	byMember := map[string]int{}
	for _, id := range seen {
		byMember[id]++
	}
	partsOf := map[string][]int32{}
	for id, ps := range assigned {
		for p := range ps {
			partsOf[id] = append(partsOf[id], p)
		}
		sort.Slice(partsOf[id], func(i, j int) bool { return partsOf[id][i] < partsOf[id][j] })
	}
	mu.Unlock()
	if byMember["b"] == 0 {
		t.Errorf("member b consumed nothing: %v", byMember)
	}
	for p := int32(0); p < partitions; p++ {
		for o := int64(0); o < 2*perPartition; o++ {
			mu.Lock()
			_, ok := seen[po{p, o}]
			mu.Unlock()
			if !ok {
				t.Fatalf("record %d/%d never consumed", p, o)
			}
		}
	}

	// Commit what is left and check the group through the admin API:
	// Stable, two members of the consumer protocol with the balancer's
	// name, two partitions each, and every partition committed at its end.
	for _, cl := range []*kgo.Client{a, b} {
		if err := cl.CommitMarkedOffsets(ctx); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	eventually(t, 15*time.Second, "committed offsets visible via kadm", func() error {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		if err := offs.Error(); err != nil {
			return err
		}
		for p := int32(0); p < partitions; p++ {
			o, ok := offs.Lookup(topic, p)
			if !ok {
				return fmt.Errorf("no committed offset for partition %d", p)
			}
			if o.At != 2*perPartition {
				return fmt.Errorf("partition %d committed at %d, want %d", p, o.At, 2*perPartition)
			}
		}
		return nil
	})
	lag, err := adm.Lag(ctx, group)
	if err != nil {
		t.Fatalf("Lag: %v", err)
	}
	if tot := lag[group].Lag.Total(); tot != 0 {
		t.Errorf("group lag %d, want 0", tot)
	}

	described, err := adm.DescribeGroups(ctx, group)
	if err != nil {
		t.Fatalf("DescribeGroups: %v", err)
	}
	g := described[group]
	if g.Err != nil {
		t.Fatalf("DescribeGroups: %v", g.Err)
	}
	if g.State != "Stable" || g.ProtocolType != "consumer" || g.Protocol != "cooperative-sticky" || len(g.Members) != 2 {
		t.Fatalf("group is %s/%s/%s with %d members, want Stable/consumer/cooperative-sticky with 2", g.State, g.ProtocolType, g.Protocol, len(g.Members))
	}
	total := 0
	for _, m := range g.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			t.Fatalf("member %s: assignment is not a consumer assignment", m.MemberID)
		}
		for _, tp := range ca.Topics {
			if tp.Topic != topic || len(tp.Partitions) != 2 {
				t.Errorf("member %s is assigned %s %v, want 2 partitions of %s", m.MemberID, tp.Topic, tp.Partitions, topic)
			}
			total += len(tp.Partitions)
		}
	}
	if total != partitions {
		t.Errorf("%d partitions assigned in all, want %d (the clients saw %v)", total, partitions, partsOf)
	}

	// Members leave on Close (LeaveGroup); the group empties and keeps
	// its offsets.
	a.Close()
	b.Close()
	<-aDone
	<-bDone
	eventually(t, 15*time.Second, "the group is Empty after both members leave", func() error {
		d, err := adm.DescribeGroups(ctx, group)
		if err != nil {
			return err
		}
		if s := d[group].State; s != "Empty" {
			return fmt.Errorf("state %s", s)
		}
		return nil
	})
	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if _, ok := listed[group]; !ok {
		t.Errorf("ListGroups does not list %s: %v", group, listed.Groups())
	}
}
