package kafkasrv

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgmsg/pgmsg"
)

// topicConfig is a Kafka topic config mapped onto a pgmsg topic setting
// (pgmsg.Client.SetTopicSettings; docs/operations.md names them).
type topicConfig struct {
	kafka, pgmsg string
	typ          kmsg.ConfigType
	// def is Kafka's answer when the setting is not set.
	def string
	// parse turns a Kafka value into the setting's (nil: remove it).
	parse func(string) (any, error)
}

var topicConfigs = []topicConfig{
	{"cleanup.policy", "cleanup_policy", kmsg.ConfigTypeList, "delete", parseCleanupPolicy},
	{"delete.retention.ms", "delete_retention_ms", kmsg.ConfigTypeLong, "86400000", parseNonNegative},
	{"max.message.bytes", "max_record_bytes", kmsg.ConfigTypeInt, "", parseMaxBytes},
	{"retention.bytes", "retention_bytes", kmsg.ConfigTypeLong, "-1", parseUnlimited},
	{"retention.ms", "retention_ms", kmsg.ConfigTypeLong, "-1", parseUnlimited},
}

func findTopicConfig(name string) *topicConfig {
	for i := range topicConfigs {
		if topicConfigs[i].kafka == name {
			return &topicConfigs[i]
		}
	}
	return nil
}

// parseUnlimited: a count where -1 means none (the setting removed).
func parseUnlimited(v string) (any, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < -1 {
		return nil, fmt.Errorf("must be -1 (unlimited) or a non-negative integer, got %q", v)
	}
	if n == -1 {
		return nil, nil
	}
	return n, nil
}

func parseNonNegative(v string) (any, error) {
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 {
		return nil, fmt.Errorf("must be a non-negative integer, got %q", v)
	}
	return n, nil
}

func parseMaxBytes(v string) (any, error) {
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 1 || n > math.MaxInt32 {
		return nil, fmt.Errorf("must be a positive integer, got %q", v)
	}
	return n, nil
}

func parseCleanupPolicy(v string) (any, error) {
	var parts []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p != "delete" && p != "compact" {
			return nil, fmt.Errorf("must be delete, compact or both, got %q", v)
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ","), nil
}

// settingsOf returns the pgmsg settings of Kafka configs, or an error
// naming the first that cannot be mapped.
func settingsOf(configs map[string]*string) (map[string]any, error) {
	out := map[string]any{}
	for name, v := range configs {
		tc := findTopicConfig(name)
		if tc == nil {
			return nil, fmt.Errorf("config %s is not supported (supported: %s)", name, supportedConfigs())
		}
		if v == nil {
			out[tc.pgmsg] = nil
			if tc.pgmsg == "max_record_bytes" { // a column: back to its default
				out[tc.pgmsg] = pgmsg.MaxRecordBytesDefault
			}
			continue
		}
		val, err := tc.parse(*v)
		if err != nil {
			return nil, fmt.Errorf("config %s %v", name, err)
		}
		out[tc.pgmsg] = val
	}
	return out, nil
}

func supportedConfigs() string {
	var names []string
	for _, tc := range topicConfigs {
		names = append(names, tc.kafka)
	}
	return strings.Join(names, ", ")
}

// describeTopicConfigs returns the Kafka configs of t, those named only
// when names is not nil.
func describeTopicConfigs(t *pgmsg.Topic, names []string) []kmsg.DescribeConfigsResponseResourceConfig {
	var out []kmsg.DescribeConfigsResponseResourceConfig
	for _, tc := range topicConfigs {
		if names != nil && !contains(names, tc.kafka) {
			continue
		}
		c := kmsg.NewDescribeConfigsResponseResourceConfig()
		c.Name = tc.kafka
		c.ConfigType = tc.typ
		val, set := settingValue(t, tc)
		c.Value = &val
		c.IsDefault = !set
		c.Source = kmsg.ConfigSourceDefaultConfig
		if set {
			c.Source = kmsg.ConfigSourceDynamicTopicConfig
		}
		out = append(out, c)
	}
	return out
}

func settingValue(t *pgmsg.Topic, tc topicConfig) (string, bool) {
	if tc.pgmsg == "max_record_bytes" {
		return strconv.Itoa(t.MaxRecordBytes), t.MaxRecordBytes != pgmsg.MaxRecordBytesDefault
	}
	v, ok := t.Settings[tc.pgmsg]
	if !ok || v == nil {
		return tc.def, false
	}
	switch x := v.(type) {
	case float64:
		return strconv.FormatFloat(x, 'f', -1, 64), true
	case string:
		return x, true
	}
	return fmt.Sprint(v), true
}

func contains(names []string, name string) bool {
	for _, n := range names {
		if n == name {
			return true
		}
	}
	return false
}
