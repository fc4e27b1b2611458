package weirgo

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProduceConsumeCodecs produces with kgo's idempotent producer (its
// default: InitProducerId, sequence numbers, acks=all) under every codec
// Kafka has and reads every record back: its value, key, headers, timestamp
// and a dense run of offsets per partition. Records are placed on partitions
// by hand so the expected offsets are known.
func TestProduceConsumeCodecs(t *testing.T) {
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()},
		{"gzip", kgo.GzipCompression()},
		{"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()},
		{"zstd", kgo.ZstdCompression()},
	}
	adm := newAdmin(t)
	for _, c := range codecs {
		t.Run(c.name, func(t *testing.T) {
			const partitions = 3
			const perPartition = 200
			topic := createTopic(t, adm, partitions, nil)

			p := newClient(t,
				kgo.DefaultProduceTopic(topic),
				kgo.RequiredAcks(kgo.AllISRAcks()), // the default, stated: idempotence needs it
				kgo.ProducerBatchCompression(c.codec),
				kgo.RecordPartitioner(kgo.ManualPartitioner()),
				// A linger so batches hold many records: a
				// compressed batch of one record tests little.
				kgo.ProducerLinger(20*time.Millisecond),
			)

			// want[partition][offset] is the record produced there.
			want := make([]map[int64]*kgo.Record, partitions)
			for i := range want {
				want[i] = make(map[int64]*kgo.Record)
			}
			var mu sync.Mutex
			var wg sync.WaitGroup
			var produceErr error
			ctx := ctxFor(t, 60*time.Second)
			for i := 0; i < partitions*perPartition; i++ {
				r := testRecord(i)
				r.Partition = int32(i % partitions)
				wg.Add(1)
				p.Produce(ctx, r, func(r *kgo.Record, err error) {
					defer wg.Done()
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						produceErr = err
						return
					}
					if _, dup := want[r.Partition][r.Offset]; dup {
						produceErr = fmt.Errorf("two records acknowledged at %d/%d", r.Partition, r.Offset)
					}
					want[r.Partition][r.Offset] = r
				})
			}
			wg.Wait()
			if produceErr != nil {
				t.Fatalf("produce: %v", produceErr)
			}
			// The producer's acknowledgements already have to be
			// dense: offsets 0..perPartition-1 on each partition.
			for part := range want {
				for o := int64(0); o < perPartition; o++ {
					if want[part][o] == nil {
						t.Fatalf("partition %d: no record acknowledged at offset %d", part, o)
					}
				}
			}

			// A plain (groupless) consumer from the start of the
			// topic, reading with the same codec's batches.
			cons := newClient(t,
				kgo.ConsumeTopics(topic),
				kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
			)
			got := consumeN(t, ctx, cons, partitions*perPartition)
			if len(got) != partitions*perPartition {
				t.Fatalf("consumed %d records, want %d", len(got), partitions*perPartition)
			}
			next := make([]int64, partitions) // offsets must come in order, densely
			for _, r := range got {
				if r.Offset != next[r.Partition] {
					t.Fatalf("partition %d: got offset %d, want %d (offsets are dense and in order)", r.Partition, r.Offset, next[r.Partition])
				}
				next[r.Partition]++
				w := want[r.Partition][r.Offset]
				if err := sameRecord(w, r); err != nil {
					t.Fatalf("%d/%d: %v", r.Partition, r.Offset, err)
				}
			}

			// Nothing more arrives: a short poll past the end
			// returns no records (the producer is done).
			shortCtx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			defer cancel()
			if extra := cons.PollFetches(shortCtx).Records(); len(extra) != 0 {
				t.Fatalf("consumed %d records past the end, first at %d/%d", len(extra), extra[0].Partition, extra[0].Offset)
			}
		})
	}
}

// testRecord is record i: a key (null for every 7th record), a value that
// compresses (null for every 11th: a tombstone), and headers, one of them
// with an empty value and one repeated key (Kafka keeps headers in order,
// duplicates included).
func testRecord(i int) *kgo.Record {
	r := &kgo.Record{
		Headers: []kgo.RecordHeader{
			{Key: "seq", Value: []byte(fmt.Sprint(i))},
			{Key: "empty", Value: []byte{}},
			{Key: "dup", Value: []byte("a")},
			{Key: "dup", Value: []byte("b")},
		},
	}
	if i%7 != 0 {
		r.Key = []byte(fmt.Sprintf("key-%d", i))
	}
	if i%11 != 0 {
		// Sizes from a few bytes to a few KiB.
		r.Value = []byte(fmt.Sprintf("value-%d:", i) + strings.Repeat("abcdefgh", i%500))
	}
	return r
}

// sameRecord compares what was produced with what was consumed, telling a
// null key or value apart from an empty one.
func sameRecord(w, r *kgo.Record) error {
	if (w.Key == nil) != (r.Key == nil) || !bytes.Equal(w.Key, r.Key) {
		return fmt.Errorf("key %q, want %q", r.Key, w.Key)
	}
	if (w.Value == nil) != (r.Value == nil) || !bytes.Equal(w.Value, r.Value) {
		return fmt.Errorf("value of %d bytes (null %v), want %d bytes (null %v)", len(r.Value), r.Value == nil, len(w.Value), w.Value == nil)
	}
	if len(w.Headers) != len(r.Headers) {
		return fmt.Errorf("%d headers, want %d", len(r.Headers), len(w.Headers))
	}
	for i := range w.Headers {
		if w.Headers[i].Key != r.Headers[i].Key || !bytes.Equal(w.Headers[i].Value, r.Headers[i].Value) {
			return fmt.Errorf("header %d is %s=%q, want %s=%q", i, r.Headers[i].Key, r.Headers[i].Value, w.Headers[i].Key, w.Headers[i].Value)
		}
	}
	// Kafka keeps milliseconds; kgo stamped the record with nanoseconds.
	if w.Timestamp.UnixMilli() != r.Timestamp.UnixMilli() {
		return fmt.Errorf("timestamp %v, want %v", r.Timestamp, w.Timestamp)
	}
	return nil
}
