package weirgo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// startCluster starts `size` nodes making one cluster (one shard each,
// unpinned so they share the machine's cores) and waits until every node
// names all of them as brokers not fenced. The nodes are stopped when the test ends.
func startCluster(t *testing.T, size int) []*node {
	t.Helper()
	bin, err := weirBin()
	if err != nil {
		t.Fatal(err)
	}
	voters := make([]string, size)
	for i := range voters {
		p, err := freePort()
		if err != nil {
			t.Fatal(err)
		}
		voters[i] = fmt.Sprintf("%d@127.0.0.1:%d", i+1, p)
	}
	var nodes []*node
	t.Cleanup(func() {
		for _, n := range nodes {
			if err := n.stop(); err != nil {
				t.Errorf("stopping a node: %v", err)
			}
		}
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("---- node %d log ----\n%s", i+1, n.logText())
			}
		}
	})
	for i := 0; i < size; i++ {
		n, err := startNodeOnce(bin, "1", "--node-id", fmt.Sprint(i+1),
			"--voters", strings.Join(voters, ","), "--cpus", "none")
		if err != nil {
			t.Fatalf("starting node %d: %v", i+1, err)
		}
		nodes = append(nodes, n)
	}
	for _, n := range nodes {
		eventually(t, 30*time.Second, "every node names all brokers", func() error {
			// A new client each time: a client keeps the brokers it
			// learnt first (a node names itself until it registers).
			cl, err := kgo.NewClient(kgo.SeedBrokers(n.kafka))
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			// DescribeCluster: the brokers not fenced (Metadata names
			// fenced ones too, and a node registers fenced at start).
			resp, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, cl)
			if err != nil {
				return err
			}
			if len(resp.Brokers) != size || resp.ControllerID < 1 {
				return fmt.Errorf("%s names %d brokers not fenced, controller %d", n.kafka, len(resp.Brokers), resp.ControllerID)
			}
			return nil
		})
	}
	return nodes
}

// clientOf is a kgo client bootstrapped from one node.
func clientOf(t *testing.T, n *node, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(n.kafka)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// TestClusterProduceConsume: a topic dealt over three nodes, produced to
// through one (idempotently: producer ids come from the metadata quorum)
// and read by a group through another; every record acknowledged is read.
func TestClusterProduceConsume(t *testing.T) {
	nodes := startCluster(t, 3)
	ctx := ctxFor(t, 90*time.Second)
	adm := kadm.NewClient(clientOf(t, nodes[2]))
	topic := name("cluster")
	if _, err := adm.CreateTopic(ctx, 12, 1, nil, topic); err != nil {
		t.Fatalf("CreateTopic: %v", err)
	}
	td, err := kadm.NewClient(clientOf(t, nodes[0])).ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	led := map[int32]int{}
	for _, p := range td[topic].Partitions {
		led[p.Leader]++
	}
	if len(led) != 3 || led[1] != 4 || led[2] != 4 || led[3] != 4 {
		t.Fatalf("partitions led per node: %v, want 4 each on 1, 2, 3", led)
	}

	// A produce sent to a node that does not lead the partition: KIP-951's
	// current leader and its endpoint come with NOT_LEADER_OR_FOLLOWER.
	var p0Leader int32 = -1
	for _, p := range td[topic].Partitions {
		if p.Partition == 0 {
			p0Leader = p.Leader
		}
	}
	other := int32(1)
	if p0Leader == 1 {
		other = 2
	}
	raw := clientOf(t, nodes[other-1])
	req := kmsg.NewPtrProduceRequest()
	req.Acks = -1
	req.TimeoutMillis = 5000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rt.TopicID = td[topic].ID
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = 0
	batch := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: 0, FirstTimestamp: 1, MaxTimestamp: 1,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: 1,
		Records: (&kmsg.Record{Value: []byte("x")}).AppendTo(nil)}
	rp.Records = batch.AppendTo(nil)
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, raw.Broker(int(other)))
	if err != nil {
		t.Fatalf("produce to node %d: %v", other, err)
	}
	refused := resp.Topics[0].Partitions[0]
	if refused.ErrorCode != 6 || refused.CurrentLeader.LeaderID != p0Leader {
		t.Fatalf("produce to a node not leading: error %d, current leader %d; want 6 and %d",
			refused.ErrorCode, refused.CurrentLeader.LeaderID, p0Leader)
	}
	if len(resp.Brokers) != 1 || resp.Brokers[0].NodeID != p0Leader {
		t.Fatalf("node endpoints %+v, want node %d's", resp.Brokers, p0Leader)
	}

	// OffsetForLeaderEpoch routes as Produce does: NOT_LEADER_OR_FOLLOWER
	// from a node that does not lead the partition.
	epochs := kmsg.NewPtrOffsetForLeaderEpochRequest()
	epochs.ReplicaID = -1
	et := kmsg.NewOffsetForLeaderEpochRequestTopic()
	et.Topic = topic
	ep := kmsg.NewOffsetForLeaderEpochRequestTopicPartition()
	ep.Partition = 0
	ep.CurrentLeaderEpoch = -1
	ep.LeaderEpoch = 0
	et.Partitions = append(et.Partitions, ep)
	epochs.Topics = append(epochs.Topics, et)
	eresp, err := epochs.RequestWith(ctx, raw.Broker(int(other)))
	if err != nil {
		t.Fatalf("OffsetForLeaderEpoch to node %d: %v", other, err)
	}
	if code := eresp.Topics[0].Partitions[0].ErrorCode; code != 6 {
		t.Fatalf("OffsetForLeaderEpoch to a node not leading: error %d, want 6", code)
	}

	producer := clientOf(t, nodes[1], kgo.DefaultProduceTopic(topic))
	var want []string
	for i := 0; i < 600; i++ {
		v := fmt.Sprintf("v%d", i)
		r := &kgo.Record{Key: []byte(v), Value: []byte(v)}
		if err := producer.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatalf("producing %s: %v", v, err)
		}
		want = append(want, v)
	}

	// On its leader: epoch 0 ends at the log end (KIP-101/279); an epoch
	// newer than any has no end; a current epoch the leader has not seen
	// is UNKNOWN_LEADER_EPOCH (KIP-320).
	ends, err := kadm.NewClient(clientOf(t, nodes[0])).ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	end0, _ := ends.Lookup(topic, 0)
	for _, c := range []struct {
		current, asked int32
		code           int16
		epoch          int32
		end            int64
	}{
		{0, 0, 0, 0, end0.Offset},
		{-1, 0, 0, 0, end0.Offset},
		{0, 5, 0, -1, -1},
		{1, 0, 75, -1, -1}, // UNKNOWN_LEADER_EPOCH
	} {
		ep.CurrentLeaderEpoch, ep.LeaderEpoch = c.current, c.asked
		et.Partitions = []kmsg.OffsetForLeaderEpochRequestTopicPartition{ep}
		epochs.Topics = []kmsg.OffsetForLeaderEpochRequestTopic{et}
		eresp, err := epochs.RequestWith(ctx, raw.Broker(int(p0Leader)))
		if err != nil {
			t.Fatalf("OffsetForLeaderEpoch to node %d: %v", p0Leader, err)
		}
		got := eresp.Topics[0].Partitions[0]
		if got.ErrorCode != c.code || got.LeaderEpoch != c.epoch || got.EndOffset != c.end {
			t.Fatalf("OffsetForLeaderEpoch current %d asked %d: error %d epoch %d end %d; want %d %d %d",
				c.current, c.asked, got.ErrorCode, got.LeaderEpoch, got.EndOffset, c.code, c.epoch, c.end)
		}
	}
	if end0.Offset == 0 {
		t.Fatalf("partition 0 is empty after 600 records")
	}

	consumer := clientOf(t, nodes[0], kgo.ConsumeTopics(topic), kgo.ConsumerGroup(name("readers")),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	var got []string
	for _, r := range consumeN(t, ctx, consumer, len(want)) {
		got = append(got, string(r.Value))
	}
	sort.Strings(want)
	sort.Strings(got)
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("read %d records, want the %d produced", len(got), len(want))
	}
}
