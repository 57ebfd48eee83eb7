package cli

import (
	"context"
	"io"
	"log/slog"
	"net"

	"github.com/pgmsg/pgmsg"
	"github.com/pgmsg/pgmsg/internal/kafkagroup"
	"github.com/pgmsg/pgmsg/internal/kafkasrv"
)

// benchKafkaListener starts the Kafka listener of `pgmsg bench pubsub
// --impl kafka` in this process, on 127.0.0.1:0 over c, with its group
// coordinator, as pgmsg serve --kafka-listen does.
func benchKafkaListener(_ context.Context, c *pgmsg.Client) (string, func(), error) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	co, err := kafkagroup.New(kafkagroup.Config{Client: c, Logger: logger})
	if err != nil {
		return "", nil, err
	}
	srv, err := kafkasrv.New(kafkasrv.Config{Client: c, Groups: co, Logger: logger})
	if err != nil {
		co.Close()
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		co.Close()
		return "", nil, err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(ln)
	}()
	return ln.Addr().String(), func() {
		_ = srv.Close()
		<-done
		co.Close()
	}, nil
}
