package kafkasrv_test

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// Topic administration through kadm: create with configs (mapped onto
// pgmsg's settings), describe, alter incrementally, add partitions and
// delete; what pgmsg cannot do answers Kafka's codes.
func TestTopicAdmin(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	ctx := tb.Ctx
	adm := kadm.NewClient(tb.kclient(t))

	res, err := adm.CreateTopic(ctx, 3, 1, map[string]*string{
		"retention.ms": kadm.StringPtr("3600000"), "cleanup.policy": kadm.StringPtr("compact"),
		"max.message.bytes": kadm.StringPtr("5000")}, "adm")
	require.NoError(t, err)
	require.NoError(t, res.Err)
	require.Equal(t, int32(3), res.NumPartitions)
	d, err := tb.Client.DescribeTopic(ctx, "adm")
	require.NoError(t, err)
	require.Equal(t, 3, d.Partitions)
	require.Equal(t, 5000, d.MaxRecordBytes)
	require.EqualValues(t, 3600000, d.Settings["retention_ms"])
	require.Equal(t, "compact", d.Settings["cleanup_policy"])

	// Errors: exists, bad name, bad partitions, unknown config.
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "adm")
	require.ErrorIs(t, err, kerr.TopicAlreadyExists)
	_, err = adm.CreateTopic(ctx, 1, 1, nil, "bad name")
	require.ErrorIs(t, err, kerr.InvalidTopicException)
	_, err = adm.CreateTopic(ctx, 2000, 1, nil, "many")
	require.ErrorIs(t, err, kerr.InvalidPartitions)
	_, err = adm.CreateTopic(ctx, 1, 1, map[string]*string{"segment.ms": kadm.StringPtr("1")}, "cfg")
	require.ErrorIs(t, err, kerr.InvalidConfig)
	_, err = tb.Client.DescribeTopic(ctx, "cfg")
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic, "nothing created for a refused config")

	// Describe.
	rcs, err := adm.DescribeTopicConfigs(ctx, "adm")
	require.NoError(t, err)
	rc, err := rcs.On("adm", nil)
	require.NoError(t, err)
	got := map[string]string{}
	for _, c := range rc.Configs {
		got[c.Key] = c.MaybeValue()
	}
	require.Equal(t, "3600000", got["retention.ms"])
	require.Equal(t, "compact", got["cleanup.policy"])
	require.Equal(t, "5000", got["max.message.bytes"])
	require.Equal(t, "-1", got["retention.bytes"])

	// Alter incrementally: set, delete, append.
	ars, err := adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "retention.bytes", Value: kadm.StringPtr("1000000")},
		{Op: kadm.DeleteConfig, Name: "retention.ms"},
		{Op: kadm.AppendConfig, Name: "cleanup.policy", Value: kadm.StringPtr("delete")},
	}, "adm")
	require.NoError(t, err)
	require.NoError(t, ars[0].Err)
	d, err = tb.Client.DescribeTopic(ctx, "adm")
	require.NoError(t, err)
	require.EqualValues(t, 1000000, d.Settings["retention_bytes"])
	require.NotContains(t, d.Settings, "retention_ms")
	require.Equal(t, "compact,delete", d.Settings["cleanup_policy"])
	ars, err = adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{{Op: kadm.SetConfig, Name: "retention.ms", Value: kadm.StringPtr("soon")}}, "adm")
	require.NoError(t, err)
	require.ErrorIs(t, ars[0].Err, kerr.InvalidConfig)

	// Partitions grow, never shrink.
	cps, err := adm.CreatePartitions(ctx, 2, "adm")
	require.NoError(t, err)
	require.NoError(t, cps["adm"].Err)
	d, err = tb.Client.DescribeTopic(ctx, "adm")
	require.NoError(t, err)
	require.Equal(t, 5, d.Partitions)
	cps, err = adm.UpdatePartitions(ctx, 2, "adm")
	require.NoError(t, err)
	require.ErrorIs(t, cps["adm"].Err, kerr.InvalidPartitions)

	// Metadata sees the new partitions; delete drops the topic.
	md, err := adm.Metadata(ctx, "adm")
	require.NoError(t, err)
	require.Len(t, md.Topics["adm"].Partitions, 5)
	drs, err := adm.DeleteTopics(ctx, "adm", "nope")
	require.NoError(t, err)
	require.NoError(t, drs["adm"].Err)
	require.ErrorIs(t, drs["nope"].Err, kerr.UnknownTopicOrPartition)
	_, err = tb.Client.DescribeTopic(ctx, "adm")
	require.ErrorIs(t, err, pgmsg.ErrUnknownTopic)
}

// Without a group coordinator the group APIs are not advertised, and
// a request for one is answered COORDINATOR_NOT_AVAILABLE in a response
// of its kind; the connection stays up.
func TestNoGroups(t *testing.T) {
	t.Parallel()
	tb := setup(t, nil)
	rc := dialRaw(t, tb)
	av := rc.roundTrip(t, kmsg.NewPtrApiVersionsRequest()).(*kmsg.ApiVersionsResponse)
	for _, k := range av.ApiKeys {
		require.NotContains(t, []int16{8, 9, 11, 12, 13, 14, 15, 16, 42, 47}, k.ApiKey)
	}
	lg := kmsg.NewPtrListGroupsRequest()
	lg.Version = 4
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, rc.roundTrip(t, lg).(*kmsg.ListGroupsResponse).ErrorCode)
	jg := kmsg.NewPtrJoinGroupRequest()
	jg.Version = 9
	jg.Group = "g"
	jg.ProtocolType = "consumer"
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, rc.roundTrip(t, jg).(*kmsg.JoinGroupResponse).ErrorCode)
	fc := kmsg.NewPtrFindCoordinatorRequest()
	fc.CoordinatorKey = "g"
	require.Equal(t, kerr.CoordinatorNotAvailable.Code, rc.roundTrip(t, fc).(*kmsg.FindCoordinatorResponse).ErrorCode)
	md := rc.roundTrip(t, kmsg.NewPtrMetadataRequest()).(*kmsg.MetadataResponse)
	require.Len(t, md.Brokers, 1)
}
