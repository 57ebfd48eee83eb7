package kafkasrv_test

import (
	"encoding/binary"
	"hash/crc32"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// rawRecord is a record of a hand-built batch.
type rawRecord struct {
	key, value []byte
	headers    []kmsg.Header
}

// rawBatch encodes an uncompressed v2 record batch with a valid CRC.
func rawBatch(producerID int64, epoch int16, seq int32, firstTS int64, recs ...rawRecord) []byte {
	var body []byte
	for i, r := range recs {
		kr := kmsg.Record{OffsetDelta: int32(i), TimestampDelta64: int64(i), Key: r.key, Value: r.value, Headers: r.headers}
		kr.Length = int32(len(kr.AppendTo(nil)) - 1)
		body = kr.AppendTo(body)
	}
	rb := kmsg.RecordBatch{Magic: 2, LastOffsetDelta: int32(len(recs) - 1), FirstTimestamp: firstTS,
		MaxTimestamp: firstTS + int64(len(recs)-1), ProducerID: producerID, ProducerEpoch: epoch,
		FirstSequence: seq, NumRecords: int32(len(recs)), Records: body}
	b := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(b[8:], uint32(len(b)-12))
	binary.BigEndian.PutUint32(b[17:], crc32.Checksum(b[21:], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// produceReq is a Produce request of one batch to (topic, partition).
func produceReq(topic string, partition int32, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version = 9
	req.Acks = -1
	req.TimeoutMillis = 30000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition = partition
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}
