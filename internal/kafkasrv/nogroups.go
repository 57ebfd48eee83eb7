package kafkasrv

import (
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// isGroupKey reports whether key is one of the group APIs.
func isGroupKey(key int16) bool {
	for _, k := range groupKeys {
		if k == key {
			return true
		}
	}
	return false
}

// groupsUnavailable answers a group API request when the listener has no
// group coordinator (Config.Groups nil): a response of the request's
// kind whose every error code is COORDINATOR_NOT_AVAILABLE, so that the
// client reports it instead of losing its connection.
func groupsUnavailable(req kmsg.Request) kmsg.Response {
	code := kerr.CoordinatorNotAvailable.Code
	switch req := req.(type) {
	case *kmsg.OffsetCommitRequest:
		resp := req.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				st.Partitions = append(st.Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: rp.Partition, ErrorCode: code})
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp
	case *kmsg.OffsetFetchRequest:
		resp := req.ResponseKind().(*kmsg.OffsetFetchResponse)
		resp.ErrorCode = code
		for _, g := range req.Groups {
			sg := kmsg.NewOffsetFetchResponseGroup()
			sg.Group, sg.ErrorCode = g.Group, code
			resp.Groups = append(resp.Groups, sg)
		}
		return resp
	case *kmsg.JoinGroupRequest:
		resp := req.ResponseKind().(*kmsg.JoinGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.HeartbeatRequest:
		resp := req.ResponseKind().(*kmsg.HeartbeatResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.LeaveGroupRequest:
		resp := req.ResponseKind().(*kmsg.LeaveGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.SyncGroupRequest:
		resp := req.ResponseKind().(*kmsg.SyncGroupResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.DescribeGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DescribeGroupsResponse)
		for _, g := range req.Groups {
			sg := kmsg.NewDescribeGroupsResponseGroup()
			sg.Group, sg.ErrorCode = g, code
			resp.Groups = append(resp.Groups, sg)
		}
		return resp
	case *kmsg.ListGroupsRequest:
		resp := req.ResponseKind().(*kmsg.ListGroupsResponse)
		resp.ErrorCode = code
		return resp
	case *kmsg.DeleteGroupsRequest:
		resp := req.ResponseKind().(*kmsg.DeleteGroupsResponse)
		for _, g := range req.Groups {
			resp.Groups = append(resp.Groups, kmsg.DeleteGroupsResponseGroup{Group: g, ErrorCode: code})
		}
		return resp
	case *kmsg.OffsetDeleteRequest:
		resp := req.ResponseKind().(*kmsg.OffsetDeleteResponse)
		resp.ErrorCode = code
		return resp
	}
	return nil
}
