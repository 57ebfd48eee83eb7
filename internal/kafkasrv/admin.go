package kafkasrv

import (
	"context"
	"errors"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// maxPartitions is the most partitions a pgmsg topic has.
const maxPartitions = 1024

// adminError maps a pgmsg error of topic administration onto Kafka's code
// and message; a cancelled context is returned to close the connection.
func adminError(ctx context.Context, err error) (int16, *string, error) {
	if ctx.Err() != nil {
		return 0, nil, ctx.Err()
	}
	var code int16
	switch {
	case errors.Is(err, pgmsg.ErrTopicExists):
		code = kerr.TopicAlreadyExists.Code
	case errors.Is(err, pgmsg.ErrUnknownTopic):
		code = kerr.UnknownTopicOrPartition.Code
	case errors.Is(err, pgmsg.ErrInvalidName):
		code = kerr.InvalidTopicException.Code
	case errors.Is(err, pgmsg.ErrInvalidArgument):
		code = kerr.InvalidConfig.Code
	default:
		code, _ = errorCode(err)
	}
	msg := err.Error()
	if code == kerr.UnknownServerError.Code {
		msg = "internal error"
	}
	return code, &msg, nil
}

func strp(s string) *string { return &s }

// createTopics creates each topic with its partitions and configs (the
// replication factor is accepted and ignored: durability is PostgreSQL's).
func (c *conn) createTopics(ctx context.Context, req *kmsg.CreateTopicsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.CreateTopicsResponse)
	created := false
	for _, rt := range req.Topics {
		st := kmsg.NewCreateTopicsResponseTopic()
		st.Topic = rt.Topic
		st.ReplicationFactor = 1
		n := rt.NumPartitions
		if n == -1 {
			n = int32(c.s.cfg.AutoCreatePartitions)
		}
		if len(rt.ReplicaAssignment) > 0 {
			n = int32(len(rt.ReplicaAssignment))
		}
		configs := map[string]*string{}
		for _, cf := range rt.Configs {
			configs[cf.Name] = cf.Value
		}
		settings, cerr := settingsOf(configs)
		switch {
		case c.authorize(ctx, "topic", rt.Topic, "create") != 0:
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case pgmsg.ValidateName("topic", rt.Topic) != nil:
			st.ErrorCode, st.ErrorMessage = kerr.InvalidTopicException.Code, strp("topic names are 1 to 200 letters, digits, '.', '_' or '-'")
		case n < 1 || n > maxPartitions:
			st.ErrorCode, st.ErrorMessage = kerr.InvalidPartitions.Code, strp("partitions must be 1 to 1024")
		case rt.ReplicationFactor == 0 || rt.ReplicationFactor < -1:
			st.ErrorCode, st.ErrorMessage = kerr.InvalidReplicationFactor.Code, strp("replication factor must be positive (it is ignored: durability is PostgreSQL's)")
		case cerr != nil:
			st.ErrorCode, st.ErrorMessage = kerr.InvalidConfig.Code, strp(cerr.Error())
		default:
			cfg := pgmsg.TopicConfig{Partitions: int(n)}
			if v, ok := settings["max_record_bytes"]; ok {
				if mb, ok := v.(int64); ok {
					cfg.MaxRecordBytes = int(mb)
				}
				delete(settings, "max_record_bytes")
			}
			for k, v := range settings {
				if v == nil {
					delete(settings, k)
				}
			}
			if len(settings) > 0 {
				cfg.Settings = settings
			}
			if req.ValidateOnly {
				if _, err := c.s.topics.find(ctx, rt.Topic); err == nil {
					st.ErrorCode = kerr.TopicAlreadyExists.Code
				}
				break
			}
			t, err := c.s.client.CreateTopic(ctx, rt.Topic, cfg)
			if err != nil {
				code, msg, ferr := adminError(ctx, err)
				if ferr != nil {
					return nil, ferr
				}
				st.ErrorCode, st.ErrorMessage = code, msg
				break
			}
			created = true
			st.TopicID = c.s.topicID(t)
			for _, dc := range describeTopicConfigs(t, nil) {
				st.Configs = append(st.Configs, kmsg.CreateTopicsResponseTopicConfig{
					Name: dc.Name, Value: dc.Value, Source: int8(dc.Source)})
			}
		}
		if st.ErrorCode == 0 {
			st.NumPartitions = n
		} else {
			st.NumPartitions, st.ReplicationFactor = -1, -1
		}
		if req.Version < 1 {
			st.ErrorMessage = nil
		}
		resp.Topics = append(resp.Topics, st)
	}
	if created {
		c.s.topics.invalidate()
	}
	return resp, nil
}

// deleteTopics drops topics, named or (v6+) by id.
func (c *conn) deleteTopics(ctx context.Context, req *kmsg.DeleteTopicsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DeleteTopicsResponse)
	type target struct {
		name *string
		id   [16]byte
	}
	var targets []target
	for _, n := range req.TopicNames {
		targets = append(targets, target{name: strp(n)})
	}
	for _, t := range req.Topics {
		targets = append(targets, target{name: t.Topic, id: t.TopicID})
	}
	for _, tg := range targets {
		st := kmsg.NewDeleteTopicsResponseTopic()
		st.Topic, st.TopicID = tg.name, tg.id
		if tg.name == nil || *tg.name == "" {
			t, err := c.s.topics.findID(ctx, tg.id)
			if err != nil {
				return nil, err
			}
			if t == nil {
				st.ErrorCode = kerr.UnknownTopicID.Code
				resp.Topics = append(resp.Topics, st)
				continue
			}
			st.Topic = strp(t.Name)
		}
		name := *st.Topic
		if c.authorize(ctx, "topic", name, "delete") != 0 {
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
		} else if err := c.s.client.DeleteTopic(ctx, name); err != nil {
			code, msg, ferr := adminError(ctx, err)
			if ferr != nil {
				return nil, ferr
			}
			st.ErrorCode = code
			if req.Version >= 5 {
				st.ErrorMessage = msg
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	c.s.topics.invalidate()
	return resp, nil
}

// createPartitions grows topics (pgmsg never shrinks one).
func (c *conn) createPartitions(ctx context.Context, req *kmsg.CreatePartitionsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.CreatePartitionsResponse)
	for _, rt := range req.Topics {
		st := kmsg.NewCreatePartitionsResponseTopic()
		st.Topic = rt.Topic
		t, err := c.s.topics.find(ctx, rt.Topic)
		switch {
		case c.authorize(ctx, "topic", rt.Topic, "alter") != 0:
			st.ErrorCode = kerr.TopicAuthorizationFailed.Code
		case err != nil && ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			st.ErrorCode, st.ErrorMessage, _ = adminError(ctx, err)
		case rt.Count <= int32(t.Partitions) || rt.Count > maxPartitions:
			st.ErrorCode = kerr.InvalidPartitions.Code
			st.ErrorMessage = strp("the count must be more than the topic's partitions and at most 1024")
		case req.ValidateOnly:
		default:
			if _, err := c.s.client.AddPartitions(ctx, rt.Topic, int(rt.Count)); err != nil {
				code, msg, ferr := adminError(ctx, err)
				if ferr != nil {
					return nil, ferr
				}
				st.ErrorCode, st.ErrorMessage = code, msg
			}
		}
		resp.Topics = append(resp.Topics, st)
	}
	c.s.topics.invalidate()
	return resp, nil
}

// describeConfigs answers topics' configs (those mapped onto pgmsg
// settings) and an empty list for a broker.
func (c *conn) describeConfigs(ctx context.Context, req *kmsg.DescribeConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
	for _, rr := range req.Resources {
		sr := kmsg.NewDescribeConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		switch rr.ResourceType {
		case kmsg.ConfigResourceTypeTopic:
			if c.authorize(ctx, "topic", rr.ResourceName, "describe") != 0 {
				sr.ErrorCode = kerr.TopicAuthorizationFailed.Code
				break
			}
			t, err := c.s.topics.find(ctx, rr.ResourceName)
			if err != nil {
				code, msg, ferr := adminError(ctx, err)
				if ferr != nil {
					return nil, ferr
				}
				sr.ErrorCode, sr.ErrorMessage = code, msg
				break
			}
			sr.Configs = describeTopicConfigs(t, rr.ConfigNames)
		case kmsg.ConfigResourceTypeBroker, kmsg.ConfigResourceTypeBrokerLogger:
		default:
			sr.ErrorCode, sr.ErrorMessage = kerr.InvalidRequest.Code, strp("only topic and broker configs are described")
		}
		resp.Resources = append(resp.Resources, sr)
	}
	return resp, nil
}

// incrementalAlterConfigs sets and deletes topic configs (mapped onto
// pgmsg settings); append and subtract apply to cleanup.policy only.
func (c *conn) incrementalAlterConfigs(ctx context.Context, req *kmsg.IncrementalAlterConfigsRequest) (kmsg.Response, error) {
	resp := req.ResponseKind().(*kmsg.IncrementalAlterConfigsResponse)
	for _, rr := range req.Resources {
		sr := kmsg.NewIncrementalAlterConfigsResponseResource()
		sr.ResourceType, sr.ResourceName = rr.ResourceType, rr.ResourceName
		if rr.ResourceType != kmsg.ConfigResourceTypeTopic {
			sr.ErrorCode, sr.ErrorMessage = kerr.InvalidRequest.Code, strp("only topic configs can be altered")
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		if c.authorize(ctx, "topic", rr.ResourceName, "alter") != 0 {
			sr.ErrorCode = kerr.TopicAuthorizationFailed.Code
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		t, err := c.s.topics.find(ctx, rr.ResourceName)
		if err != nil {
			code, msg, ferr := adminError(ctx, err)
			if ferr != nil {
				return nil, ferr
			}
			sr.ErrorCode, sr.ErrorMessage = code, msg
			resp.Resources = append(resp.Resources, sr)
			continue
		}
		configs := map[string]*string{}
		var bad string
		for _, cf := range rr.Configs {
			switch cf.Op {
			case kmsg.IncrementalAlterConfigOpSet:
				if cf.Value == nil {
					bad = "config " + cf.Name + ": set needs a value"
				}
				configs[cf.Name] = cf.Value
			case kmsg.IncrementalAlterConfigOpDelete:
				configs[cf.Name] = nil
			case kmsg.IncrementalAlterConfigOpAppend, kmsg.IncrementalAlterConfigOpSubtract:
				if cf.Name != "cleanup.policy" || cf.Value == nil {
					bad = "config " + cf.Name + ": append and subtract apply to cleanup.policy only"
					break
				}
				cur, _ := settingValue(t, *findTopicConfig("cleanup.policy"))
				v := listOp(cur, *cf.Value, cf.Op == kmsg.IncrementalAlterConfigOpAppend)
				if v == "" {
					configs[cf.Name] = nil
				} else {
					configs[cf.Name] = &v
				}
			default:
				bad = "unknown config operation"
			}
		}
		settings, err := settingsOf(configs)
		switch {
		case bad != "":
			sr.ErrorCode, sr.ErrorMessage = kerr.InvalidConfig.Code, strp(bad)
		case err != nil:
			sr.ErrorCode, sr.ErrorMessage = kerr.InvalidConfig.Code, strp(err.Error())
		case req.ValidateOnly || len(settings) == 0:
		default:
			if _, err := c.s.client.SetTopicSettings(ctx, rr.ResourceName, settings); err != nil {
				code, msg, ferr := adminError(ctx, err)
				if ferr != nil {
					return nil, ferr
				}
				sr.ErrorCode, sr.ErrorMessage = code, msg
			}
			c.s.topics.invalidate()
		}
		resp.Resources = append(resp.Resources, sr)
	}
	return resp, nil
}

// listOp appends items of add to (or removes them from) the list cur.
func listOp(cur, items string, add bool) string {
	var out []string
	has := map[string]bool{}
	for _, p := range splitList(cur) {
		has[p] = true
		out = append(out, p)
	}
	for _, p := range splitList(items) {
		switch {
		case add && !has[p]:
			out = append(out, p)
			has[p] = true
		case !add && has[p]:
			for i, q := range out {
				if q == p {
					out = append(out[:i], out[i+1:]...)
					break
				}
			}
			delete(has, p)
		}
	}
	s := ""
	for i, p := range out {
		if i > 0 {
			s += ","
		}
		s += p
	}
	return s
}

func splitList(s string) []string {
	var out []string
	start := 0
	for i := 0; i <= len(s); i++ {
		if i == len(s) || s[i] == ',' {
			if i > start {
				out = append(out, s[start:i])
			}
			start = i + 1
		}
	}
	return out
}
