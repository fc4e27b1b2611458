package weirgo

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// The admin tests drive kadm, the admin client Go tools (kcl, kminion,
// redpanda console, terraform providers) are built on, through each group of
// APIs and check the answers a Kafka broker gives.

// configOf finds one config of a described topic.
func configOf(t *testing.T, rcs kadm.ResourceConfigs, topic, key string) kadm.Config {
	t.Helper()
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatalf("DescribeConfigs: no answer for %s: %v", topic, err)
	}
	if rc.Err != nil {
		t.Fatalf("DescribeConfigs %s: %v (%s)", topic, rc.Err, rc.ErrMessage)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			return c
		}
	}
	t.Fatalf("DescribeConfigs %s: no %s among %d configs", topic, key, len(rc.Configs))
	return kadm.Config{}
}

// TestAdminTopicConfigs: CreateTopics with configs (and validate-only),
// DescribeConfigs, IncrementalAlterConfigs SET and DELETE.
func TestAdminTopicConfigs(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 60*time.Second)

	// Validate-only creates nothing.
	dry := name("dry")
	vr, err := adm.ValidateCreateTopics(ctx, 3, 1, nil, dry)
	if err != nil || vr[dry].Err != nil {
		t.Fatalf("ValidateCreateTopics: %v %v", err, vr[dry].Err)
	}
	if td, err := adm.ListTopics(ctx, dry); err != nil || td.Has(dry) && td[dry].Err == nil {
		t.Fatalf("a validate-only create made topic %s (%v)", dry, err)
	}

	topic := createTopic(t, adm, 2, map[string]*string{
		"retention.ms":      kmsg.StringPtr("3600000"),
		"max.message.bytes": kmsg.StringPtr("2097152"),
		"cleanup.policy":    kmsg.StringPtr("delete"),
	})

	// The same name again is TOPIC_ALREADY_EXISTS; an unknown config is
	// INVALID_CONFIG.
	// (kadm returns the topic's error as its error too.)
	again, err := adm.CreateTopic(ctx, 1, 1, nil, topic)
	if !errors.Is(again.Err, kerr.TopicAlreadyExists) {
		t.Errorf("creating %s twice: %v %v, want TOPIC_ALREADY_EXISTS", topic, err, again.Err)
	}
	bad := name("bad")
	badResp, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"no.such.config": kmsg.StringPtr("1")}, bad)
	if !errors.Is(badResp.Err, kerr.InvalidConfig) {
		t.Errorf("creating with an unknown config: %v %v, want INVALID_CONFIG", err, badResp.Err)
	}

	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs: %v", err)
	}
	for key, want := range map[string]string{"retention.ms": "3600000", "max.message.bytes": "2097152"} {
		c := configOf(t, rcs, topic, key)
		if c.MaybeValue() != want || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
			t.Errorf("%s = %q from %v, want %q from DYNAMIC_TOPIC_CONFIG", key, c.MaybeValue(), c.Source, want)
		}
	}
	// cleanup.policy was set to its default value: its source is
	// checked in TestAdminConfigSourceOfExplicitDefault.
	if c := configOf(t, rcs, topic, "cleanup.policy"); c.MaybeValue() != "delete" {
		t.Errorf("cleanup.policy = %q, want delete", c.MaybeValue())
	}
	// A config the topic does not set is described with its default, as
	// Kafka describes every topic config.
	if c := configOf(t, rcs, topic, "segment.bytes"); c.Value == nil || c.Source == kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("segment.bytes (unset) = %v from %v, want a default value", c.Value, c.Source)
	}

	// Incremental alter: SET one, DELETE another (back to its default).
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.ms", Value: kmsg.StringPtr("7200000")},
		{Op: kadm.DeleteConfig, Name: "max.message.bytes"},
	}, topic)
	if err != nil {
		t.Fatalf("AlterTopicConfigs: %v", err)
	}
	for _, r := range ar {
		if r.Err != nil {
			t.Fatalf("AlterTopicConfigs %s: %v (%s)", r.Name, r.Err, r.ErrMessage)
		}
	}
	rcs, err = adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs: %v", err)
	}
	if c := configOf(t, rcs, topic, "retention.ms"); c.MaybeValue() != "7200000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("retention.ms after SET = %q from %v, want 7200000 from DYNAMIC_TOPIC_CONFIG", c.MaybeValue(), c.Source)
	}
	if c := configOf(t, rcs, topic, "max.message.bytes"); c.MaybeValue() == "2097152" || c.Source == kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("max.message.bytes after DELETE = %q from %v, want its default", c.MaybeValue(), c.Source)
	}
	if c := configOf(t, rcs, topic, "cleanup.policy"); c.MaybeValue() != "delete" {
		t.Errorf("cleanup.policy, untouched by the alter, = %q", c.MaybeValue())
	}

	// Describing a topic that does not exist answers its error.
	missing := name("missing")
	rcs, err = adm.DescribeTopicConfigs(ctx, missing)
	if err == nil {
		if rc, _ := rcs.On(missing, nil); !errors.Is(rc.Err, kerr.UnknownTopicOrPartition) {
			t.Errorf("DescribeConfigs of a missing topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", rc.Err)
		}
	}
}

// TestAdminConfigSourceOfExplicitDefault: a config given when a topic is
// created, or SET later, is the topic's own (DYNAMIC_TOPIC_CONFIG) even when
// its value equals the default: Kafka keeps the topic's overrides, not a
// comparison with the default, and kafka-configs --describe lists them. It
// stays the topic's until it is DELETEd.
func TestAdminConfigSourceOfExplicitDefault(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 30*time.Second)
	topic := createTopic(t, adm, 1, map[string]*string{"cleanup.policy": kmsg.StringPtr("delete")})
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs: %v", err)
	}
	if c := configOf(t, rcs, topic, "cleanup.policy"); c.MaybeValue() != "delete" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("cleanup.policy given at creation = %q from %v, want \"delete\" from DYNAMIC_TOPIC_CONFIG", c.MaybeValue(), c.Source)
	}
	// SET to the default value: an override all the same.
	ar, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kmsg.StringPtr("604800000")}}, topic)
	if err != nil || ar[0].Err != nil {
		t.Fatalf("AlterTopicConfigs: %v %+v", err, ar)
	}
	rcs, err = adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatalf("DescribeTopicConfigs: %v", err)
	}
	if c := configOf(t, rcs, topic, "retention.ms"); c.MaybeValue() != "604800000" || c.Source != kmsg.ConfigSourceDynamicTopicConfig {
		t.Errorf("retention.ms SET to 604800000 (the default) = %q from %v, want from DYNAMIC_TOPIC_CONFIG", c.MaybeValue(), c.Source)
	}
}

// TestAdminCreatePartitions grows a topic and produces to a new partition;
// shrinking is refused.
func TestAdminCreatePartitions(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 60*time.Second)
	topic := createTopic(t, adm, 2, nil)

	cr, err := adm.CreatePartitions(ctx, 3, topic)
	if err != nil || cr[topic].Err != nil {
		t.Fatalf("CreatePartitions +3: %v %v", err, cr[topic].Err)
	}
	eventually(t, 10*time.Second, "metadata shows 5 partitions", func() error {
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		if n := len(td[topic].Partitions); n != 5 {
			return fmt.Errorf("%d partitions", n)
		}
		return nil
	})
	p := newClient(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	r, err := p.ProduceSync(ctx, &kgo.Record{Partition: 4, Value: []byte("on a new partition")}).First()
	if err != nil || r.Partition != 4 || r.Offset != 0 {
		t.Fatalf("produce to partition 4: %v (at %d/%d)", err, r.Partition, r.Offset)
	}

	// Fewer partitions than the topic has: INVALID_PARTITIONS.
	ur, err := adm.UpdatePartitions(ctx, 3, topic)
	if err != nil || !errors.Is(ur[topic].Err, kerr.InvalidPartitions) {
		t.Errorf("UpdatePartitions to 3 of 5: %v %v, want INVALID_PARTITIONS", err, ur[topic].Err)
	}
}

// TestAdminListOffsetsDeleteRecords lists offsets (start, end, by time, max
// timestamp) of records produced with known timestamps, then deletes records
// and sees the start move, for ListOffsets and for a consumer.
func TestAdminListOffsetsDeleteRecords(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 60*time.Second)
	topic := createTopic(t, adm, 2, nil)

	// Ten records on partition 0, a second apart, in one produce (so in
	// one batch: by-time lookups must look inside batches).
	base := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	p := newClient(t, kgo.DefaultProduceTopic(topic), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.ZstdCompression()))
	var rs []*kgo.Record
	for i := 0; i < 10; i++ {
		rs = append(rs, &kgo.Record{Partition: 0, Timestamp: base.Add(time.Duration(i) * time.Second), Value: []byte(strconv.Itoa(i))})
	}
	if err := p.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	check := func(what string, l kadm.ListedOffsets, err error, part int32, wantOffset int64) kadm.ListedOffset {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		o, ok := l.Lookup(topic, part)
		if !ok {
			t.Fatalf("%s: no answer for partition %d", what, part)
		}
		if o.Err != nil || o.Offset != wantOffset {
			t.Errorf("%s partition %d: offset %d (%v), want %d", what, part, o.Offset, o.Err, wantOffset)
		}
		return o
	}
	l, err := adm.ListStartOffsets(ctx, topic)
	check("start", l, err, 0, 0)
	check("start", l, err, 1, 0)
	l, err = adm.ListEndOffsets(ctx, topic)
	check("end", l, err, 0, 10)
	check("end", l, err, 1, 0)
	l, err = adm.ListCommittedOffsets(ctx, topic) // read_committed: the last stable offset
	check("last stable", l, err, 0, 10)

	// By time: the first record at or after the time.
	l, err = adm.ListOffsetsAfterMilli(ctx, base.Add(3500*time.Millisecond).UnixMilli(), topic)
	if o := check("after base+3.5s", l, err, 0, 4); o.Timestamp != base.Add(4*time.Second).UnixMilli() {
		t.Errorf("after base+3.5s: timestamp %d, want %d", o.Timestamp, base.Add(4*time.Second).UnixMilli())
	}
	l, err = adm.ListOffsetsAfterMilli(ctx, base.UnixMilli(), topic)
	check("after base", l, err, 0, 0)
	// Past every record: kadm answers the end offset (Kafka answers -1,
	// which kadm turns into the end).
	l, err = adm.ListOffsetsAfterMilli(ctx, base.Add(time.Minute).UnixMilli(), topic)
	check("after the last", l, err, 0, 10)
	// Max timestamp: the record holding the largest timestamp, the last.
	l, err = adm.ListMaxTimestampOffsets(ctx, topic)
	if o := check("max timestamp", l, err, 0, 9); o.Timestamp != base.Add(9*time.Second).UnixMilli() {
		t.Errorf("max timestamp: timestamp %d, want %d", o.Timestamp, base.Add(9*time.Second).UnixMilli())
	}

	// Delete the records before offset 4.
	del := kadm.Offsets{}
	del.AddOffset(topic, 0, 4, -1)
	dr, err := adm.DeleteRecords(ctx, del)
	if err != nil {
		t.Fatalf("DeleteRecords: %v", err)
	}
	if r, ok := dr.Lookup(topic, 0); !ok || r.Err != nil || r.LowWatermark != 4 {
		t.Fatalf("DeleteRecords: %+v, want low watermark 4", r)
	}
	l, err = adm.ListStartOffsets(ctx, topic)
	check("start after DeleteRecords", l, err, 0, 4)
	l, err = adm.ListEndOffsets(ctx, topic)
	check("end after DeleteRecords", l, err, 0, 10)

	c := newClient(t, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	got := consumeN(t, ctx, c, 6)
	if got[0].Offset != 4 || string(got[0].Value) != "4" || got[len(got)-1].Offset != 9 {
		t.Errorf("a consumer from the start reads %d..%d (%q first), want 4..9", got[0].Offset, got[len(got)-1].Offset, got[0].Value)
	}

	// Deleting past the end is OFFSET_OUT_OF_RANGE.
	del = kadm.Offsets{}
	del.AddOffset(topic, 0, 11, -1)
	dr, err = adm.DeleteRecords(ctx, del)
	if err != nil {
		t.Fatalf("DeleteRecords past the end: %v", err)
	}
	if r, _ := dr.Lookup(topic, 0); !errors.Is(r.Err, kerr.OffsetOutOfRange) {
		t.Errorf("DeleteRecords past the end: %v, want OFFSET_OUT_OF_RANGE", r.Err)
	}
}

// TestAdminGroups: offsets committed for a group without members, listed,
// described, fetched, deleted per partition; a group with a live member
// cannot be deleted; an empty one can.
func TestAdminGroups(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 60*time.Second)
	topic := createTopic(t, adm, 3, nil)
	group := name("admin-group")

	offs := kadm.Offsets{}
	for p := int32(0); p < 3; p++ {
		offs.Add(kadm.Offset{Topic: topic, Partition: p, At: int64(10 * (p + 1)), LeaderEpoch: -1, Metadata: "m" + strconv.Itoa(int(p))})
	}
	if err := adm.CommitAllOffsets(ctx, group, offs); err != nil {
		t.Fatalf("CommitAllOffsets: %v", err)
	}

	listed, err := adm.ListGroups(ctx)
	if err != nil {
		t.Fatalf("ListGroups: %v", err)
	}
	if lg, ok := listed[group]; !ok || lg.State != "Empty" {
		t.Errorf("ListGroups: %s listed %v as %+v, want Empty", group, ok, lg)
	}
	if empties, err := adm.ListGroups(ctx, "Empty"); err != nil || !hasGroup(empties, group) {
		t.Errorf("ListGroups(Empty) lacks %s: %v", group, err)
	}
	if stables, err := adm.ListGroups(ctx, "Stable"); err != nil || hasGroup(stables, group) {
		t.Errorf("ListGroups(Stable) lists the empty group %s: %v", group, err)
	}
	dg, err := adm.DescribeGroups(ctx, group)
	if err != nil || dg[group].Err != nil || dg[group].State != "Empty" || len(dg[group].Members) != 0 {
		t.Errorf("DescribeGroups: %v %+v, want Empty with no members", err, dg[group])
	}

	fetched, err := adm.FetchOffsets(ctx, group)
	if err != nil || fetched.Error() != nil {
		t.Fatalf("FetchOffsets: %v %v", err, fetched.Error())
	}
	for p := int32(0); p < 3; p++ {
		o, ok := fetched.Lookup(topic, p)
		if !ok || o.At != int64(10*(p+1)) || o.Metadata != "m"+strconv.Itoa(int(p)) {
			t.Errorf("FetchOffsets %d: %+v, want %d with metadata m%d", p, o, 10*(p+1), p)
		}
	}

	// OffsetDelete of partition 1 only.
	ts := kadm.TopicsSet{}
	ts.Add(topic, 1)
	dres, err := adm.DeleteOffsets(ctx, group, ts)
	if err != nil {
		t.Fatalf("DeleteOffsets: %v", err)
	}
	if e, ok := dres.Lookup(topic, 1); !ok || e != nil {
		t.Errorf("DeleteOffsets partition 1: %v (answered %v)", e, ok)
	}
	fetched, err = adm.FetchOffsets(ctx, group)
	if err != nil {
		t.Fatalf("FetchOffsets: %v", err)
	}
	if o, ok := fetched.Lookup(topic, 1); ok && o.At >= 0 {
		t.Errorf("partition 1 still committed at %d after DeleteOffsets", o.At)
	}
	if o, ok := fetched.Lookup(topic, 0); !ok || o.At != 10 {
		t.Errorf("partition 0 lost its offset with partition 1's: %+v", o)
	}

	// A live member: the group is Stable, cannot be deleted
	// (NON_EMPTY_GROUP), and a subscribed topic's offsets cannot be
	// deleted (GROUP_SUBSCRIBED_TO_TOPIC).
	live := name("live-group")
	member := newClient(t, kgo.ConsumerGroup(live), kgo.ConsumeTopics(topic))
	go member.PollFetches(ctx) // joins the group
	eventually(t, 30*time.Second, "the live group is Stable with one member", func() error {
		d, err := adm.DescribeGroups(ctx, live)
		if err != nil {
			return err
		}
		if g := d[live]; g.State != "Stable" || len(g.Members) != 1 {
			return fmt.Errorf("state %s, %d members", g.State, len(g.Members))
		}
		return nil
	})
	d, err := adm.DescribeGroups(ctx, live)
	if g := d[live]; err != nil || g.ProtocolType != "consumer" || g.Members[0].ClientID == "" {
		t.Errorf("DescribeGroups of the live group: %v %+v", err, g)
	}
	if lg, err := adm.ListGroups(ctx); err != nil || lg[live].State != "Stable" || lg[live].ProtocolType != "consumer" {
		t.Errorf("ListGroups: the live group is %+v (%v)", lg[live], err)
	}
	delLive, err := adm.DeleteGroup(ctx, live)
	if !errors.Is(err, kerr.NonEmptyGroup) && !errors.Is(delLive.Err, kerr.NonEmptyGroup) {
		t.Errorf("DeleteGroup of a group with a member: %v %v, want NON_EMPTY_GROUP", err, delLive.Err)
	}
	liveTS := kadm.TopicsSet{}
	liveTS.Add(topic, 0)
	ldres, err := adm.DeleteOffsets(ctx, live, liveTS)
	if e, _ := ldres.Lookup(topic, 0); !errors.Is(err, kerr.GroupSubscribedToTopic) && !errors.Is(e, kerr.GroupSubscribedToTopic) {
		t.Errorf("DeleteOffsets of a topic the live group consumes: %v %v, want GROUP_SUBSCRIBED_TO_TOPIC", err, e)
	}
	member.Close()

	// The empty group is deleted with its offsets.
	dgr, err := adm.DeleteGroup(ctx, group)
	if err != nil || dgr.Err != nil {
		t.Fatalf("DeleteGroup: %v %v", err, dgr.Err)
	}
	listed, err = adm.ListGroups(ctx)
	if err != nil || hasGroup(listed, group) {
		t.Errorf("ListGroups still lists the deleted group %s (%v)", group, err)
	}
	fetched, err = adm.FetchOffsets(ctx, group)
	if err == nil {
		fetched.Each(func(o kadm.OffsetResponse) {
			if o.At >= 0 {
				t.Errorf("deleted group still has offset %d for %s/%d", o.At, o.Topic, o.Partition)
			}
		})
	}
}

// TestAdminDeleteTopics deletes a topic: it leaves the metadata, producing to
// it is refused, deleting it again is UNKNOWN_TOPIC_OR_PARTITION.
func TestAdminDeleteTopics(t *testing.T) {
	adm := newAdmin(t)
	ctx := ctxFor(t, 60*time.Second)
	topic := createTopic(t, adm, 2, nil)
	p := newClient(t, kgo.DefaultProduceTopic(topic))
	if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}

	dr, err := adm.DeleteTopic(ctx, topic)
	if err != nil || dr.Err != nil {
		t.Fatalf("DeleteTopic: %v %v", err, dr.Err)
	}
	eventually(t, 10*time.Second, "the topic leaves the metadata", func() error {
		td, err := adm.ListTopics(ctx)
		if err != nil {
			return err
		}
		if td.Has(topic) {
			return errors.New("still listed")
		}
		return nil
	})
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatalf("Metadata: %v", err)
	}
	if td := md.Topics[topic]; !errors.Is(td.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("Metadata of the deleted topic: %v, want UNKNOWN_TOPIC_OR_PARTITION", td.Err)
	}
	dr, err = adm.DeleteTopic(ctx, topic)
	if err == nil && !errors.Is(dr.Err, kerr.UnknownTopicOrPartition) {
		t.Errorf("deleting it again: %v, want UNKNOWN_TOPIC_OR_PARTITION", dr.Err)
	}

	// Producing to it fails (the node does not auto-create topics); a
	// short timeout, since kgo keeps retrying an unknown topic.
	p2 := newClient(t, kgo.DefaultProduceTopic(topic), kgo.UnknownTopicRetries(2), kgo.RecordDeliveryTimeout(5*time.Second))
	if err := p2.ProduceSync(ctx, &kgo.Record{Value: []byte("y")}).FirstErr(); err == nil {
		t.Errorf("a produce to the deleted topic succeeded")
	}
}

// TestAdminCluster: Metadata's brokers and cluster id, DescribeCluster,
// broker configs, ApiVersions, FindCoordinator.
func TestAdminCluster(t *testing.T) {
	cl := newClient(t)
	adm := kadm.NewClient(cl)
	ctx := ctxFor(t, 30*time.Second)
	host, portStr, _ := net.SplitHostPort(weir.kafka)
	port, _ := strconv.Atoi(portStr)

	md, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatalf("BrokerMetadata: %v", err)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].Host != host || md.Brokers[0].Port != int32(port) {
		t.Fatalf("brokers %+v, want one at %s", md.Brokers, weir.kafka)
	}
	if md.Cluster == "" || md.Controller != md.Brokers[0].NodeID {
		t.Errorf("cluster %q controller %d, want an id and the one broker (%d) as controller", md.Cluster, md.Controller, md.Brokers[0].NodeID)
	}

	// DescribeCluster (kadm has no wrapper: the raw request).
	dreq := kmsg.NewPtrDescribeClusterRequest()
	dresp, err := dreq.RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	if err := kerr.ErrorForCode(dresp.ErrorCode); err != nil {
		t.Fatalf("DescribeCluster: %v", err)
	}
	if dresp.ClusterID != md.Cluster || len(dresp.Brokers) != 1 || dresp.Brokers[0].Host != host || dresp.Brokers[0].Port != int32(port) || dresp.ControllerID != md.Controller {
		t.Errorf("DescribeCluster %+v disagrees with Metadata %+v", dresp, md)
	}

	// Broker configs: the broker's own id as resource, and the cluster
	// default ("") resource.
	bc, err := adm.DescribeBrokerConfigs(ctx, md.Brokers[0].NodeID)
	if err != nil {
		t.Fatalf("DescribeBrokerConfigs: %v", err)
	}
	// weir answers a broker resource without error but with no configs
	// (it has no settable broker configs; Kafka lists every broker config
	// with its source): a known difference, so only the answer is checked.
	if len(bc) != 1 || bc[0].Err != nil || bc[0].Name != strconv.Itoa(int(md.Brokers[0].NodeID)) {
		t.Errorf("DescribeBrokerConfigs(%d): %+v, want an answer for the broker without error", md.Brokers[0].NodeID, bc)
	}
	t.Logf("DescribeBrokerConfigs(%d): %d configs", md.Brokers[0].NodeID, len(bc[0].Configs))

	av, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	av.Each(func(b kadm.BrokerApiVersions) {
		if b.Err != nil {
			t.Errorf("ApiVersions from %d: %v", b.NodeID, b.Err)
			return
		}
		for _, key := range []int16{0, 1, 3, 19, 20, 32, 44, 60} { // produce, fetch, metadata, create/delete topics, describe/incremental-alter configs, describe cluster
			if _, _, ok := b.KeyVersions(key); !ok {
				t.Errorf("ApiVersions lacks key %d", key)
			}
		}
	})

	fc := adm.FindGroupCoordinators(ctx, name("some-group"))
	fc.Each(func(r kadm.FindCoordinatorResponse) {
		if r.Err != nil || r.NodeID != md.Brokers[0].NodeID || r.Port != int32(port) {
			t.Errorf("FindCoordinator: %+v", r)
		}
	})
}

func hasGroup(l kadm.ListedGroups, group string) bool {
	_, ok := l[group]
	return ok
}
