package weirgo

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestTxnOffsetCommitKIP848Member is the exchange kgo's GroupTransactSession
// makes for a member of a KIP-848 group (ServerSideBalancer), request by
// request, so a wrong answer names itself: a member joins with
// ConsumerGroupHeartbeat, a transactional producer adds the group to its
// transaction, and TxnOffsetCommit (v3+: member id, and the member epoch as
// generation id, as Kafka's consumer sends it for a consumer group) must be
// accepted, the offsets must stay pending (OffsetFetch with require_stable:
// UNSTABLE_OFFSET_COMMIT) until EndTxn commits them, and then be visible.
func TestTxnOffsetCommitKIP848Member(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 30*time.Second)
	topic := createTopic(t, adm, 1, nil)
	group := name("eos848")
	txnID := name("eos848-txn")
	cl := newClient(t)

	// Join: epoch 0 with the subscription, the client's own member id (v1).
	memberID := name("member")
	hb := kmsg.NewPtrConsumerGroupHeartbeatRequest()
	hb.Version = 1
	hb.Group = group
	hb.MemberID = memberID
	hb.MemberEpoch = 0
	hb.RebalanceTimeoutMillis = 30000
	hb.SubscribedTopicNames = []string{topic}
	hb.ServerAssignor = kmsg.StringPtr("uniform")
	var epoch int32
	// Heartbeat until the partition is assigned (the member reconciles
	// heartbeat by heartbeat).
	eventually(t, 15*time.Second, "the member is assigned the topic's partition", func() error {
		resp, err := hb.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
			t.Fatalf("ConsumerGroupHeartbeat: %v %v", err, resp.ErrorMessage)
		}
		epoch = resp.MemberEpoch
		hb.MemberEpoch = epoch
		hb.SubscribedTopicNames = nil // unchanged: not resent
		hb.ServerAssignor = nil
		if resp.Assignment == nil || len(resp.Assignment.Topics) == 0 {
			return fmt.Errorf("epoch %d, no assignment yet", epoch)
		}
		return nil
	})
	t.Logf("member %s at epoch %d", memberID, epoch)

	// A transactional producer id.
	ip := kmsg.NewPtrInitProducerIDRequest()
	ip.TransactionalID = &txnID
	ip.TransactionTimeoutMillis = 60000
	ipResp, err := ip.RequestWith(ctx, cl)
	if err != nil || ipResp.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %v", err, kerr.ErrorForCode(ipResp.ErrorCode))
	}
	ao := kmsg.NewPtrAddOffsetsToTxnRequest()
	ao.TransactionalID = txnID
	ao.ProducerID = ipResp.ProducerID
	ao.ProducerEpoch = ipResp.ProducerEpoch
	ao.Group = group
	aoResp, err := ao.RequestWith(ctx, cl)
	if err != nil || aoResp.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v %v", err, kerr.ErrorForCode(aoResp.ErrorCode))
	}

	toc := kmsg.NewPtrTxnOffsetCommitRequest()
	toc.Version = 3
	toc.TransactionalID = txnID
	toc.Group = group
	toc.ProducerID = ipResp.ProducerID
	toc.ProducerEpoch = ipResp.ProducerEpoch
	toc.Generation = epoch
	toc.MemberID = memberID
	tt := kmsg.NewTxnOffsetCommitRequestTopic()
	tt.Topic = topic
	tp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	tp.Partition = 0
	tp.Offset = 7
	tp.LeaderEpoch = -1
	tt.Partitions = append(tt.Partitions, tp)
	toc.Topics = append(toc.Topics, tt)
	for _, v := range []int16{3, 4, 5} {
		toc.Version = v
		tocResp, err := toc.RequestWith(ctx, cl)
		if err != nil {
			t.Fatalf("TxnOffsetCommit v%d: %v", v, err)
		}
		if code := tocResp.Topics[0].Partitions[0].ErrorCode; code != 0 {
			t.Errorf("TxnOffsetCommit v%d (member %s, generation = member epoch %d): %v, want no error", v, memberID, epoch, kerr.ErrorForCode(code))
		}
	}

	et := kmsg.NewPtrEndTxnRequest()
	et.TransactionalID = txnID
	et.ProducerID = ipResp.ProducerID
	et.ProducerEpoch = ipResp.ProducerEpoch
	et.Commit = true
	etResp, err := et.RequestWith(ctx, cl)
	if err != nil || etResp.ErrorCode != 0 {
		t.Fatalf("EndTxn: %v %v", err, kerr.ErrorForCode(etResp.ErrorCode))
	}
	if t.Failed() {
		return
	}
	eventually(t, 10*time.Second, "the transaction's offset is committed", func() error {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		if o, ok := offs.Lookup(topic, 0); !ok || o.At != 7 {
			return fmt.Errorf("committed %+v", o)
		}
		return nil
	})
}

// TestGroupTransactSession848 is TestGroupTransactSession with the group on
// KIP-848's protocol (kgo's ServerSideBalancer): what franz-go's own TxnEtl
// test does for its /848 cases.
func TestGroupTransactSession848(t *testing.T) {
	groupTransactSession(t, kgo.ServerSideBalancer(), kgo.Balancers(kgo.RangeBalancer()))
}
