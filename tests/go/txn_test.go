package weirgo

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionalProduce: a kgo transactional producer commits, aborts and
// commits again on a 2-partition topic. A read_committed consumer sees the
// two committed transactions' records and none of the aborted one; a
// read_uncommitted consumer sees all three (aborted records stay in the log,
// only their visibility changes). The last committed transaction is the
// sentinel: once a read_committed consumer has it on both partitions, every
// earlier record it was going to see has been seen.
func TestTransactionalProduce(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 60*time.Second)
	topic := createTopic(t, adm, 2, nil)

	p := newClient(t,
		kgo.DefaultProduceTopic(topic),
		kgo.TransactionalID(name("txn")),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	txn := func(label string, commit kgo.TransactionEndTry) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatalf("%s: begin: %v", label, err)
		}
		var rs []*kgo.Record
		for i := 0; i < 10; i++ {
			rs = append(rs, &kgo.Record{Partition: int32(i % 2), Key: []byte(label), Value: []byte(fmt.Sprintf("%s-%d", label, i))})
		}
		if err := p.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatalf("%s: produce: %v", label, err)
		}
		if err := p.EndTransaction(ctx, commit); err != nil {
			t.Fatalf("%s: end: %v", label, err)
		}
	}
	txn("committed1", kgo.TryCommit)
	txn("aborted", kgo.TryAbort)
	txn("committed2", kgo.TryCommit)

	read := func(isolation kgo.IsolationLevel, want int) map[string]int {
		t.Helper()
		c := newClient(t,
			kgo.ConsumeTopics(topic),
			kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			kgo.FetchIsolationLevel(isolation),
		)
		byKey := map[string]int{}
		sentinel := map[int32]bool{}
		for len(sentinel) < 2 || byKey["committed2"] < 10 {
			fs := c.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("did not read the last transaction within the deadline: %v", byKey)
			}
			fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
			fs.EachRecord(func(r *kgo.Record) {
				byKey[string(r.Key)]++
				if string(r.Key) == "committed2" {
					sentinel[r.Partition] = true
				}
				if !strings.HasPrefix(string(r.Value), string(r.Key)) {
					t.Errorf("record %q under key %q", r.Value, r.Key)
				}
			})
		}
		total := 0
		for _, n := range byKey {
			total += n
		}
		if total != want {
			t.Errorf("read %d records (%v), want %d", total, byKey, want)
		}
		return byKey
	}

	committed := read(kgo.ReadCommitted(), 20)
	if committed["aborted"] != 0 || committed["committed1"] != 10 {
		t.Errorf("read_committed saw %v, want 10 of each committed transaction and none aborted", committed)
	}
	uncommitted := read(kgo.ReadUncommitted(), 30)
	if uncommitted["aborted"] != 10 {
		t.Errorf("read_uncommitted saw %v, want the aborted records too", uncommitted)
	}

	// The end offsets count the records and the three control markers
	// per partition: 5+5+5 records and 3 markers.
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		t.Fatalf("ListEndOffsets: %v", err)
	}
	for part := int32(0); part < 2; part++ {
		if o, _ := ends.Lookup(topic, part); o.Offset != 18 {
			t.Errorf("partition %d ends at %d, want 18 (15 records, 3 markers)", part, o.Offset)
		}
	}
}

// TestGroupTransactSession is the consume-transform-produce loop kgo offers
// for exactly-once processing: records consumed in a group are copied to an
// output topic in a transaction together with the group's offsets
// (TxnOffsetCommit). The first transaction is aborted: the session rewinds
// to the committed offsets and the same records are processed again, so the
// output read with read_committed holds each input record exactly once, and
// the group's committed offsets end at the input's end.
func TestGroupTransactSession(t *testing.T) {
	groupTransactSession(t)
}

// groupTransactSession runs the session with extra group options (the
// protocol and balancer).
func groupTransactSession(t *testing.T, groupOpts ...kgo.Opt) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 90*time.Second)
	in := createTopic(t, adm, 2, nil)
	out := createTopic(t, adm, 2, nil)
	group := name("eos")

	const n = 100
	p := newClient(t, kgo.DefaultProduceTopic(in))
	var rs []*kgo.Record
	for i := 0; i < n; i++ {
		rs = append(rs, &kgo.Record{Key: []byte(fmt.Sprint(i)), Value: []byte(fmt.Sprintf("in-%03d", i))})
	}
	if err := p.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce input: %v", err)
	}

	sess, err := kgo.NewGroupTransactSession(append([]kgo.Opt{
		kgo.SeedBrokers(weir.kafka),
		kgo.TransactionalID(name("eos-txn")),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(in),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.DefaultProduceTopic(out),
	}, groupOpts...)...)
	if err != nil {
		t.Fatalf("NewGroupTransactSession: %v", err)
	}
	defer sess.Close()

	aborted := false
	processed := 0   // records copied in committed transactions
	uncommitted := 0 // transactions in a row that wanted to commit and did not
	for processed < n {
		fs := sess.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("processed %d of %d records before the deadline", processed, n)
		}
		fs.EachError(func(topic string, p int32, err error) { t.Fatalf("fetch %s[%d]: %v", topic, p, err) })
		recs := fs.Records()
		if len(recs) == 0 {
			continue
		}
		if err := sess.Begin(); err != nil {
			t.Fatalf("Begin: %v", err)
		}
		// Produce errors are counted, not failed on: an aborted
		// transaction fails its buffered records on purpose.
		var produceErrs atomic.Int32
		var firstErr atomic.Value
		for _, r := range recs {
			sess.Produce(ctx, &kgo.Record{Key: r.Key, Value: []byte("out-" + strings.TrimPrefix(string(r.Value), "in-"))}, func(_ *kgo.Record, err error) {
				if err != nil {
					produceErrs.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
			})
		}
		how := kgo.TryCommit
		if !aborted {
			how = kgo.TryAbort // the first batch is thrown away, then redone
		}
		committed, err := sess.End(ctx, how)
		if err != nil {
			t.Fatalf("End(%v): %v", how, err)
		}
		if committed && produceErrs.Load() > 0 {
			t.Fatalf("a committed transaction had %d failed records: %v", produceErrs.Load(), firstErr.Load())
		}
		if !aborted {
			aborted = true
			if committed {
				t.Fatalf("End(TryAbort) reported a commit")
			}
			continue
		}
		if !committed {
			// A rebalance can abort a session's transaction; the
			// records are then consumed again, as after our abort.
			// With one member and no rebalance that is rare: ten in
			// a row means the commit itself is refused.
			uncommitted++
			if uncommitted >= 10 {
				t.Fatalf("%d transactions in a row did not commit (kgo aborts when TxnOffsetCommit answers an abortable error such as UNKNOWN_MEMBER_ID or ILLEGAL_GENERATION)", uncommitted)
			}
			t.Logf("a transaction of %d records did not commit; they are redone", len(recs))
			continue
		}
		uncommitted = 0
		processed += len(recs)
	}
	if processed != n {
		t.Errorf("committed %d records, want %d (the aborted batch was not consumed again?)", processed, n)
	}

	// The output, read_committed, holds each input record once.
	c := newClient(t, kgo.ConsumeTopics(out), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	got := consumeN(t, ctx, c, n)
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.Value))
	}
	sort.Strings(vals)
	for i := 0; i < n; i++ {
		if i >= len(vals) || vals[i] != fmt.Sprintf("out-%03d", i) {
			t.Fatalf("output records %v, want out-000..out-%03d once each", vals, n-1)
		}
	}
	shortCtx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if extra := c.PollFetches(shortCtx).Records(); len(extra) != 0 {
		t.Errorf("read_committed output has %d records past the %d expected (first %q): an aborted record shows", len(extra), n, extra[0].Value)
	}

	// The group's offsets were committed in the transactions: at the
	// input's end offsets.
	ends, err := adm.ListEndOffsets(ctx, in)
	if err != nil {
		t.Fatalf("ListEndOffsets: %v", err)
	}
	eventually(t, 10*time.Second, "the group's offsets reach the input's end", func() error {
		offs, err := adm.FetchOffsets(ctx, group)
		if err != nil {
			return err
		}
		var e error
		ends.Each(func(l kadm.ListedOffset) {
			o, ok := offs.Lookup(in, l.Partition)
			if !ok || o.At != l.Offset {
				e = fmt.Errorf("partition %d committed at %d, end %d", l.Partition, o.At, l.Offset)
			}
		})
		return e
	})
}
