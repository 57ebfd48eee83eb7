// Package kafkacompat holds the proof that Kafka clients nobody here wrote
// work against pgmsg's Kafka listener (internal/kafkasrv): franz-go's own
// kgo integration tests, librdkafka (kcat, confluent-kafka-python),
// kafka-python and kafkajs. Its tests start the listener themselves and
// run the clients as subprocesses; docs/kafka.md has the client matrix.
// The package has no code of its own outside its tests.
package kafkacompat
